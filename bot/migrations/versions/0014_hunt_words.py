"""The merged PR behind each point of main's history: its title (`series_points.pr_title`)
and how many other PRs the measured range held (`series_points.other_prs`), read from the
range's attribution when the point is recorded. Existing points have neither. And what
an inquiry last told the suspect merge's `rsi/watch` check run (`inquiries.check_said`),
and when `/rsi bisect` resumed a hunt left unresolved (`resumed_at`, `resumed_by`,
`resumed_steps`).

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-06 16:00:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("series_points") as batch:
        batch.add_column(sa.Column("pr_title", sa.String(300), nullable=True))
        batch.add_column(sa.Column("other_prs", sa.Integer(), nullable=True))
    with op.batch_alter_table("inquiries") as batch:
        batch.add_column(sa.Column("check_said", sa.String(300), nullable=True))
        batch.add_column(sa.Column("resumed_at", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("resumed_by", sa.String(100), nullable=True))
        batch.add_column(sa.Column("resumed_steps", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("inquiries") as batch:
        batch.drop_column("resumed_steps")
        batch.drop_column("resumed_by")
        batch.drop_column("resumed_at")
        batch.drop_column("check_said")
    with op.batch_alter_table("series_points") as batch:
        batch.drop_column("other_prs")
        batch.drop_column("pr_title")
