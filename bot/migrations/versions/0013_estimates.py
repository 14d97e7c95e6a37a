"""GPU-minute estimates: what a verification was expected to spend when it was created
(`verifications.estimate`: low, typical and high per GPU kind, from the task's recorded
costs), kept to compare with what it spent. Existing verifications have none.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-06 14:00:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("verifications") as batch:
        batch.add_column(sa.Column("estimate", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("verifications") as batch:
        batch.drop_column("estimate")
