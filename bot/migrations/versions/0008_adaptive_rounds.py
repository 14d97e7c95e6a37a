"""Adaptive rounds: a verification may run rounds until decided (`adaptive`), at most
`rounds` a side and `gpu_budget_minutes` per GPU kind. Existing verifications ran fixed
rounds.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-06 10:00:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("verifications") as batch:
        batch.add_column(
            sa.Column("adaptive", sa.Boolean(), nullable=False, server_default=sa.false())
        )
        batch.add_column(sa.Column("gpu_budget_minutes", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("verifications") as batch:
        batch.drop_column("gpu_budget_minutes")
        batch.drop_column("adaptive")
