"""The durable event store: one SQLite file (aiosqlite) holding every run's events and commands."""

from loopdeck.store.database import SCHEMA_VERSION, Store, StoreError, default_db_path

__all__ = ["SCHEMA_VERSION", "Store", "StoreError", "default_db_path"]
