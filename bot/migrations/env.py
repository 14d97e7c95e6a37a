"""Alembic environment: runs on the connection `bot.db.upgrade` hands over."""

from __future__ import annotations

from alembic import context
from sqlalchemy import engine_from_config, pool

from bot.models import Base

config = context.config
connection = config.attributes.get("connection")

if connection is not None:
    context.configure(
        connection=connection,
        target_metadata=Base.metadata,
        render_as_batch=connection.dialect.name == "sqlite",
    )
    with context.begin_transaction():
        context.run_migrations()
else:
    engine = engine_from_config(
        config.get_section(config.config_ini_section) or {},
        prefix="sqlalchemy.",
        poolclass=pool.NullPool,
    )
    with engine.connect() as conn:
        context.configure(
            connection=conn,
            target_metadata=Base.metadata,
            render_as_batch=conn.dialect.name == "sqlite",
        )
        with context.begin_transaction():
            context.run_migrations()
