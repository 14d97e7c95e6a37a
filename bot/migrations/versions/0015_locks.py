"""Named leases (`locks`): the runner pool's start decisions are taken one at a time,
under the `pool-start` row's lease, so two workers cannot both give away the last free
runner of a repository, an installation or a runner kind.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-06 23:30:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "locks",
        sa.Column("name", sa.String(50), primary_key=True),
        sa.Column("lease_until", sa.DateTime(timezone=True), nullable=True),
        sa.Column("lease_owner", sa.String(32), nullable=True),
    )


def downgrade() -> None:
    op.drop_table("locks")
