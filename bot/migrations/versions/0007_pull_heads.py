"""Approvals bound to what the maintainer saw: every head a tracked PR had, dated when
the App learnt of it, and the `/rsi` commands taken from comments (one action per
comment, dated refusals). Existing PRs get their current head dated now: a comment
older than this migration approves nothing by itself.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-05 10:00:00
"""

import datetime as dt

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    heads = op.create_table(
        "pull_heads",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("repo", sa.String(length=200), nullable=False),
        sa.Column("pr_number", sa.Integer(), nullable=False),
        sa.Column("sha", sa.String(length=64), nullable=False),
        sa.Column("delivery_id", sa.String(length=100), nullable=False),
        sa.Column("seen_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("repo", "pr_number", "sha", "delivery_id"),
    )
    op.create_index("ix_pull_heads_pr", "pull_heads", ["repo", "pr_number", "seen_at"])
    op.create_table(
        "pull_commands",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("repo", sa.String(length=200), nullable=False),
        sa.Column("pr_number", sa.Integer(), nullable=False),
        sa.Column("comment_id", sa.BigInteger(), nullable=False),
        sa.Column("delivery_id", sa.String(length=100), nullable=False),
        sa.Column("login", sa.String(length=100), nullable=False),
        sa.Column("refused", sa.String(length=20), nullable=True),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("repo", "comment_id"),
    )
    op.create_index("ix_pull_commands_user", "pull_commands", ["repo", "pr_number", "login", "at"])
    now = dt.datetime.now(dt.UTC)
    rows = op.get_bind().execute(sa.text("SELECT repo, number, head_sha FROM pull_requests"))
    seeded = [
        {
            "repo": repo,
            "pr_number": number,
            "sha": sha,
            "delivery_id": "migration-0007",
            "seen_at": now,
        }
        for repo, number, sha in rows
    ]
    if seeded:
        op.bulk_insert(heads, seeded)


def downgrade() -> None:
    op.drop_index("ix_pull_commands_user", table_name="pull_commands")
    op.drop_table("pull_commands")
    op.drop_index("ix_pull_heads_pr", table_name="pull_heads")
    op.drop_table("pull_heads")
