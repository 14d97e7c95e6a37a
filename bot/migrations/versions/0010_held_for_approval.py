"""Heads awaiting approval: a verification created for a head nobody trusted yet
(`held_for_approval`) waits for a maintainer and runs nothing. Existing verifications
were all of trusted heads.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-20 10:00:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("verifications") as batch:
        batch.add_column(
            sa.Column("held_for_approval", sa.Boolean(), nullable=False, server_default=sa.false())
        )


def downgrade() -> None:
    with op.batch_alter_table("verifications") as batch:
        batch.drop_column("held_for_approval")
