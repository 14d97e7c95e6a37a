"""Main's history: a series per fingerprint and the measured merges of each.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-04 23:50:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "series",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("repo", sa.String(length=200), nullable=False),
        sa.Column("task", sa.String(length=100), nullable=False),
        sa.Column("gpu", sa.String(length=40), nullable=False),
        sa.Column("driver", sa.String(length=60), nullable=False),
        sa.Column("image", sa.String(length=200), nullable=False),
        sa.Column("mode", sa.String(length=20), nullable=False),
        sa.Column("concurrency", sa.Integer(), nullable=False),
        sa.Column("metric", sa.String(length=60), nullable=False),
        sa.Column("opened_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("closed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("closed_reason", sa.String(length=300), nullable=True),
        sa.Column("successor_id", sa.Integer(), nullable=True),
        sa.ForeignKeyConstraint(["successor_id"], ["series.id"]),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_series_repo_task", "series", ["repo", "task"])
    op.create_table(
        "series_points",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("series_id", sa.Integer(), nullable=False),
        sa.Column("sha", sa.String(length=64), nullable=False),
        sa.Column("parent_sha", sa.String(length=64), nullable=False),
        sa.Column("pr_number", sa.Integer(), nullable=True),
        sa.Column("verification_id", sa.String(length=40), nullable=False),
        sa.Column("change_pct", sa.Float(), nullable=False),
        sa.Column("ci_low_pct", sa.Float(), nullable=True),
        sa.Column("ci_high_pct", sa.Float(), nullable=True),
        sa.Column("verdict", sa.String(length=20), nullable=False),
        sa.Column("pairs", sa.Integer(), nullable=True),
        sa.Column("head_value", sa.Float(), nullable=True),
        sa.Column("parent_value", sa.Float(), nullable=True),
        sa.Column("change_point", sa.String(length=20), nullable=True),
        sa.Column("bundle_key", sa.String(length=300), nullable=True),
        sa.Column("measured_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["series_id"], ["series.id"]),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("series_id", "sha", "verification_id"),
    )
    op.create_index("ix_series_points_series", "series_points", ["series_id", "measured_at"])


def downgrade() -> None:
    op.drop_index("ix_series_points_series", table_name="series_points")
    op.drop_table("series_points")
    op.drop_index("ix_series_repo_task", table_name="series")
    op.drop_table("series")
