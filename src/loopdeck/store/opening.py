"""Opening a store: the one place that knows both backends. A `postgresql://` location opens
PostgreSQL (imported only then: psycopg is slow to import); anything else is a SQLite file."""

from __future__ import annotations

from pathlib import Path

from loopdeck.store.base import Location, Store, default_db_path, is_postgres
from loopdeck.store.spill import spills_of
from loopdeck.store.sqlite import SqliteStore


async def open_store(location: Location | None = None, *, create: bool = True) -> Store:
    """The store at `location` (default: LOOPDECK_DB, else a file in the user data dir), with
    the events its runners spilled while it could not take them written back into it."""
    location = location or default_db_path()
    store: Store
    if is_postgres(location):
        from loopdeck.store.postgres import PgStore

        store = await PgStore.connect(str(location), create=create)
    else:
        store = await SqliteStore.connect(Path(location), create=create)
    if next(spills_of(store.path), None) is not None:
        from loopdeck.store.replay import bring_back_spills  # the runtime's events: not light

        store.notes = await bring_back_spills(store)
    return store
