"""Deliveries' payloads compressed with lz4 instead of pglz on PostgreSQL (14+, built with
lz4): TOAST-compressing a 24 KB webhook with pglz was the largest part of PostgreSQL's
work per acknowledged delivery (bench/README.md). Existing rows keep their compression.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-02 23:00:00
"""

from alembic import op
from sqlalchemy import text

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

_HAS_LZ4 = (
    "SELECT 1 FROM pg_settings WHERE name = 'default_toast_compression' AND 'lz4' = ANY(enumvals)"
)


def _set(method: str) -> None:
    bind = op.get_bind()
    if bind.dialect.name != "postgresql" or bind.execute(text(_HAS_LZ4)).first() is None:
        return
    op.execute(f"ALTER TABLE deliveries ALTER COLUMN payload SET COMPRESSION {method}")


def upgrade() -> None:
    _set("lz4")


def downgrade() -> None:
    _set("pglz")
