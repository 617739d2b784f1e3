"""Alembic environment for the store's migrations.

Migrations run only through :meth:`phalanx.store.Store.open`, which passes an open
connection (already inside a transaction) as ``config.attributes["connection"]``.
There is no offline (SQL script) mode and no ``alembic.ini``.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy.engine import Connection

from phalanx.store.schema import metadata


def run_migrations_online() -> None:
    """Run the pending revisions on the connection handed in by the store."""
    connection = context.config.attributes.get("connection")
    if not isinstance(connection, Connection):
        raise RuntimeError(
            "phalanx migrations run through phalanx.store.Store.open, "
            "which passes config.attributes['connection']"
        )
    context.configure(
        connection=connection,
        target_metadata=metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    raise RuntimeError("phalanx migrations have no offline mode")
run_migrations_online()
