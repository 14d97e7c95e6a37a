"""The PR's outbox (`pull_writes`: replies and reactions carried out after the state
they answer) and a lease per PR so that commands on one PR take turns. `verifications.attempts`,
never written, goes; `verifications.watch` marks a merge to the default branch measured
against its parent, and `series.detector` keeps the change detector's state.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-21 10:00:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "pull_writes",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("repo", sa.String(200), nullable=False),
        sa.Column("pr_number", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(20), nullable=False),
        sa.Column("params", sa.JSON(), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("next_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("claimed_until", sa.DateTime(timezone=True), nullable=True),
        sa.Column("done_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_pull_writes_pending", "pull_writes", ["repo", "pr_number", "done_at"])
    with op.batch_alter_table("pull_requests") as batch:
        batch.add_column(sa.Column("lease_until", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("lease_owner", sa.String(40), nullable=True))
    with op.batch_alter_table("series") as batch:
        batch.add_column(sa.Column("detector", sa.JSON(), nullable=True))
    with op.batch_alter_table("verifications") as batch:
        batch.drop_column("attempts")
        batch.add_column(
            sa.Column("watch", sa.Boolean(), nullable=False, server_default=sa.false())
        )


def downgrade() -> None:
    with op.batch_alter_table("series") as batch:
        batch.drop_column("detector")
    with op.batch_alter_table("verifications") as batch:
        batch.drop_column("watch")
        batch.add_column(
            sa.Column("attempts", sa.Integer(), nullable=False, server_default=sa.text("0"))
        )
    with op.batch_alter_table("pull_requests") as batch:
        batch.drop_column("lease_owner")
        batch.drop_column("lease_until")
    op.drop_index("ix_pull_writes_pending", table_name="pull_writes")
    op.drop_table("pull_writes")
