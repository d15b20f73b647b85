"""The durable event store: every run's events, approvals and commands, in one SQLite file
(aiosqlite) or, for runs on many hosts, one PostgreSQL database (`open_store` picks)."""

from loopdeck.store.base import SCHEMA_VERSION, Store, StoreError, default_db_path

__all__ = ["SCHEMA_VERSION", "Store", "StoreError", "default_db_path"]
