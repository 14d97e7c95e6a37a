"""The verification state machine: a version per verification (transitions are
compare-and-set), end reasons as a code with parameters, per-GPU job reasons, whether
the App opened a PR (then it has no evidence comment to look for), and the effects
outbox written in the same transaction as the state it follows from.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-03 13:00:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("verifications", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("version", sa.Integer(), nullable=False, server_default=sa.text("0"))
        )
        batch_op.add_column(sa.Column("end_reason", sa.JSON(), nullable=True))
        batch_op.add_column(sa.Column("attribution", sa.JSON(), nullable=True))
        batch_op.add_column(sa.Column("lease_owner", sa.String(length=32), nullable=True))
    with op.batch_alter_table("runner_jobs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("end_reason", sa.JSON(), nullable=True))
        batch_op.add_column(
            sa.Column("dispatch_requested_at", sa.DateTime(timezone=True), nullable=True)
        )
    with op.batch_alter_table("pull_requests", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("opened_by_app", sa.Boolean(), nullable=False, server_default=sa.false())
        )
    op.create_table(
        "effects",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("verification_id", sa.String(length=40), nullable=False),
        sa.Column("kind", sa.String(length=40), nullable=False),
        sa.Column("params", sa.JSON(), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False, server_default=sa.text("0")),
        sa.Column("next_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("done_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["verification_id"], ["verifications.id"]),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_effects_pending", "effects", ["verification_id", "done_at"])


def downgrade() -> None:
    op.drop_index("ix_effects_pending", table_name="effects")
    op.drop_table("effects")
    with op.batch_alter_table("pull_requests", schema=None) as batch_op:
        batch_op.drop_column("opened_by_app")
    with op.batch_alter_table("runner_jobs", schema=None) as batch_op:
        batch_op.drop_column("dispatch_requested_at")
        batch_op.drop_column("end_reason")
    with op.batch_alter_table("verifications", schema=None) as batch_op:
        batch_op.drop_column("lease_owner")
        batch_op.drop_column("attribution")
        batch_op.drop_column("end_reason")
        batch_op.drop_column("version")
