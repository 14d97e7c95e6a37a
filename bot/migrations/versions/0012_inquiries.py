"""The hunt for a regression's culprit (`inquiries`): confirm, bisect, alert once, and a
maintainer's answer to the alert; `verifications.inquiry_id` marks a step of one;
`series.shift_pct` sizes the level shift when a driver or image change closes a series.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-05 23:30:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "inquiries",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("repo", sa.String(200), nullable=False),
        sa.Column("task", sa.String(100), nullable=False),
        sa.Column("series_id", sa.Integer(), sa.ForeignKey("series.id"), nullable=False),
        sa.Column("side", sa.String(20), nullable=False),
        sa.Column("good_sha", sa.String(64), nullable=False),
        sa.Column("bad_sha", sa.String(64), nullable=False),
        sa.Column("state", sa.String(20), nullable=False),
        sa.Column("commits", sa.JSON(), nullable=True),
        sa.Column("lo_sha", sa.String(64), nullable=False),
        sa.Column("hi_sha", sa.String(64), nullable=False),
        sa.Column("steps", sa.JSON(), nullable=False),
        sa.Column("verification_id", sa.String(40), nullable=True),
        sa.Column("culprit_sha", sa.String(64), nullable=True),
        sa.Column("culprit_pr", sa.Integer(), nullable=True),
        sa.Column("end_reason", sa.JSON(), nullable=True),
        sa.Column("alerted_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("triage", sa.String(20), nullable=True),
        sa.Column("triaged_by", sa.String(100), nullable=True),
        sa.Column("triaged_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("lease_until", sa.DateTime(timezone=True), nullable=True),
        sa.Column("lease_owner", sa.String(32), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("series_id", "side", "good_sha", "bad_sha"),
    )
    op.create_index("ix_inquiries_repo", "inquiries", ["repo"])
    op.create_index("ix_inquiries_state", "inquiries", ["state"])
    op.create_index("ix_inquiries_culprit_pr", "inquiries", ["culprit_pr"])
    with op.batch_alter_table("verifications") as batch:
        batch.add_column(sa.Column("inquiry_id", sa.Integer(), nullable=True))
    with op.batch_alter_table("series") as batch:
        batch.add_column(sa.Column("shift_pct", sa.Float(), nullable=True))
        batch.add_column(sa.Column("shift_sha", sa.String(64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("series") as batch:
        batch.drop_column("shift_sha")
        batch.drop_column("shift_pct")
    with op.batch_alter_table("verifications") as batch:
        batch.drop_column("inquiry_id")
    op.drop_index("ix_inquiries_culprit_pr", table_name="inquiries")
    op.drop_index("ix_inquiries_state", table_name="inquiries")
    op.drop_index("ix_inquiries_repo", table_name="inquiries")
    op.drop_table("inquiries")
