"""Opening a store: the one place that knows both backends. A `postgresql://` location opens
PostgreSQL (imported only then: psycopg is slow to import); anything else is a SQLite file."""

from __future__ import annotations

from pathlib import Path

from loopdeck.store.base import Location, Store, default_db_path, is_postgres
from loopdeck.store.sqlite import SqliteStore


async def open_store(location: Location | None = None, *, create: bool = True) -> Store:
    """The store at `location` (default: LOOPDECK_DB, else a file in the user data dir)."""
    location = location or default_db_path()
    if is_postgres(location):
        from loopdeck.store.postgres import PgStore

        return await PgStore.connect(str(location), create=create)
    return await SqliteStore.connect(Path(location), create=create)
