"""Deliveries' payloads kept in the table's own rows on PostgreSQL (`STORAGE MAIN`): a
webhook compressed with lz4 (23.7 KB → 2.9 KB) is still over TOAST's 2 KB threshold, so
by default every acknowledged delivery also wrote a row and an index entry in the TOAST
table. Payloads that do not fit a page even compressed still go out of line. Existing
rows stay where they are.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-03 03:30:00
"""

from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def _set(storage: str) -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(f"ALTER TABLE deliveries ALTER COLUMN payload SET STORAGE {storage}")


def upgrade() -> None:
    _set("MAIN")


def downgrade() -> None:
    _set("EXTENDED")
