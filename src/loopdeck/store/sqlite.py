"""The embedded store: one SQLite file (creation mode 0600, WAL, schema version, clear
refusals), one aiosqlite connection behind a lock."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import aiosqlite

from loopdeck import settings
from loopdeck.store.base import (
    ADDED_COLUMNS,
    APP_ID,
    CHAIN_SINCE,
    RUN_SUMMARY_COLUMNS,
    SCHEMA_VERSION,
    SHARED_TABLES,
    Beats,
    Store,
    StoreError,
    StoreUnavailable,
    Tx,
    Work,
)
from loopdeck.store.feed import SQLITE_FEED, fill_summaries
from loopdeck.store.files import owned_store_files, private_store_files, store_folder
from loopdeck.store.leases import BEAT_HELD, LEASES_TABLE, RENEW
from loopdeck.store.presence import BEAT_WORKER, WORKERS_TABLE
from loopdeck.store.sqlite_thread import run_on_thread

T = TypeVar("T")

SCHEMA = f"""
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY, env TEXT, script TEXT, model TEXT, mode TEXT, goal TEXT,
    state TEXT, stop_reason TEXT, detail TEXT, started_at TEXT, ended_at TEXT,
    tokens INTEGER DEFAULT 0, cost_usd REAL, cost_unknown_calls INTEGER DEFAULT 0,
    pid INTEGER, host TEXT, heartbeat_at REAL, approve_mode TEXT, pid_started TEXT
    {RUN_SUMMARY_COLUMNS}
);
{SHARED_TABLES}CREATE TABLE IF NOT EXISTS commands (
    id INTEGER PRIMARY KEY AUTOINCREMENT, run_id TEXT NOT NULL, command TEXT NOT NULL,
    by TEXT NOT NULL, created_at REAL NOT NULL, consumed_at REAL
);
CREATE INDEX IF NOT EXISTS commands_open ON commands (run_id, consumed_at);
{LEASES_TABLE}{WORKERS_TABLE}"""


def busy_timeout_s() -> float:
    """How long a statement waits for another process's write lock before SQLite gives up
    (`Settings.busy_timeout_s`, `LOOPDECK_BUSY_TIMEOUT_S`: default 5 s, kept for a value that
    cannot be read). A decision waits longer than that by retrying (`store/deciding.py`),
    telling the operator in between."""
    return settings.current().busy_timeout_s


class _SqliteTx:
    """A transaction on the store's connection, begun (BEGIN IMMEDIATE) with its first
    statement, or run whole in one call on the connection's thread (`whole`)."""

    def __init__(self, db: aiosqlite.Connection, *, begun: bool = False) -> None:
        self.db = db
        self.begun = begun
        self.committed = False  # by `whole`: nothing left for the transaction's end

    async def _begin(self) -> None:
        if not self.begun:
            await self.db.execute("BEGIN IMMEDIATE")
            self.begun = True

    async def execute(self, sql: str, params: Sequence[Any] = ()) -> int:
        await self._begin()
        cursor = await self.db.execute(sql, tuple(params))
        return int(cursor.rowcount)

    async def executemany(self, sql: str, rows: list[tuple[Any, ...]]) -> None:
        await self._begin()
        await self.db.executemany(sql, rows)

    async def append(self, table: str, columns: Sequence[str], rows: list[tuple[Any, ...]]) -> None:
        await self._begin()
        marks = ", ".join("?" for _ in columns)
        await self.db.executemany(
            f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({marks})", rows
        )

    async def fetchall(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        await self._begin()
        return list(await self.db.execute_fetchall(sql, tuple(params)))

    async def whole(self, work: Work[T]) -> T:
        """BEGIN IMMEDIATE, `work`'s statements and the COMMIT in one call on the connection's
        thread (`store/sqlite_thread.py`): one hop there and back instead of one a statement (a
        writer's batch was five). aiosqlite runs a connection's calls on its own thread, in
        order, and has no public way to run one of ours there: its `_execute` is that way
        (aiosqlite 0.22, pinned; tests/test_store_one_hop.py fails if it goes). Begun
        already, the rest of the transaction goes statement by statement."""
        if self.begun:
            return await work(self)
        done: T = await self.db._execute(  # type: ignore[no-untyped-call]
            run_on_thread, self.db, work
        )
        self.begun = self.committed = True
        return done


class _SqliteBeats:
    def __init__(self, path: Path, timeout_s: float) -> None:
        self.db = sqlite3.connect(path, timeout=timeout_s, isolation_level=None)

    def beat(self, run_id: str, at: float) -> None:
        self.db.execute("UPDATE runs SET heartbeat_at = ? WHERE run_id = ?", (at, run_id))

    def renew(
        self, holder: str, until: float, at: float, itself: Sequence[Any]
    ) -> list[tuple[str, int]]:
        self.db.execute("BEGIN IMMEDIATE")
        try:
            held = [(str(r[0]), int(r[1])) for r in self.db.execute(RENEW, (until, holder))]
            self.db.execute(BEAT_HELD, (at, holder))
            self.db.execute(BEAT_WORKER, tuple(itself))
            self.db.execute("COMMIT")
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        return held

    def close(self) -> None:
        self.db.close()


def _check_path(path: Path, *, create: bool) -> None:
    """Refuse what cannot be a store before SQLite sees it, changing nothing: a directory, a
    device, fifo or socket, another user's file, one this user cannot write, and (for a command
    that does not create stores) an empty file. A new store is created private (0600); one
    that is there is made private once it is known to be a loopdeck store (`_prepare`)."""
    if path.is_dir():
        raise StoreError(f"{path}: is a directory, not a store file")
    if not path.exists():
        if not create:
            raise StoreError(f"{path}: no such store")
        store_folder(path)
        # Another process may have created it a moment ago: then open theirs.
        with contextlib.suppress(FileExistsError):
            os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
    owned_store_files(path)
    if not os.access(path, os.R_OK | os.W_OK):
        raise StoreError(
            f"{path}: the store is read-only or unreadable for this user; loopdeck needs to "
            "read and write it (its mode is left as it is)"
        )
    if not create and path.stat().st_size == 0:
        raise StoreError(f"{path}: an empty file, not a loopdeck store (left as it is)")
    store_folder(path)


class SqliteStore(Store):
    """The embedded store: one SQLite file in WAL mode."""

    backend = "sqlite"

    def __init__(self, path: Path, db: aiosqlite.Connection) -> None:
        self.path = path
        self.file = path
        self.db = db
        self.lock = asyncio.Lock()

    @classmethod
    async def connect(cls, path: Path, *, create: bool = True) -> SqliteStore:
        try:
            _check_path(path, create=create)
            busy_s = busy_timeout_s()
            db = await aiosqlite.connect(path, timeout=busy_s, isolation_level=None)
        except (OSError, sqlite3.Error) as exc:
            raise StoreError(f"{path}: cannot open: {exc}") from exc
        store = cls(path, db)
        try:
            await store._prepare(busy_s, create=create)
        except BaseException:
            await db.close()
            raise
        return store

    async def _tables(self) -> set[str]:
        rows = await self.db.execute_fetchall("SELECT name FROM sqlite_master WHERE type = 'table'")
        return {str(row[0]) for row in rows}

    async def _prepare(self, busy_s: float, *, create: bool) -> None:
        try:
            await self.db.execute(f"PRAGMA busy_timeout = {int(busy_s * 1000)}")
            tables = await self._tables()
            if not tables and not create:
                raise StoreError(f"{self.path}: not a loopdeck database (it has no tables)")
            if not tables:
                tables = await self._create_schema()
            await self._check_meta(tables)
            # Created here or found to be a loopdeck store: now it is made private, before
            # SQLite makes a -wal and -shm with the store's own mode.
            private_store_files(self.file)
            await self._use_wal()
            await self.db.execute("PRAGMA synchronous = FULL")
            # Schema objects added since version 1 are created idempotently on open.
            await self.db.executescript(SCHEMA)
            await self._migrate()
        except sqlite3.DatabaseError as exc:
            if "locked" in str(exc) or "busy" in str(exc):
                raise self.explain(exc) from exc
            raise StoreError(f"{self.path}: not a loopdeck database ({exc})") from exc

    async def _use_wal(self) -> None:
        """Switch to WAL once. SQLite answers a racing switch with "locked" at once, without
        its busy handler, so the switch is tried again while another opener holds the file."""
        for _ in range(200):
            rows = await self.db.execute_fetchall("PRAGMA journal_mode")
            if str(next(iter(rows))[0]).lower() == "wal":
                return
            try:
                await self.db.execute("PRAGMA journal_mode = WAL")
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) and "busy" not in str(exc):
                    raise
                await asyncio.sleep(0.025)
        await self.db.execute("PRAGMA journal_mode = WAL")  # the last try names the problem

    async def _create_schema(self) -> set[str]:
        """Schema and meta in one transaction: another opener sees all of it or none of it."""
        await self.db.execute("BEGIN IMMEDIATE")
        try:
            tables = await self._tables()
            if not tables:  # nobody created it while this connection waited for the lock
                for statement in SCHEMA.split(";"):
                    if statement.strip():
                        await self.db.execute(statement)
                for statement in SQLITE_FEED:
                    await self.db.execute(statement)
                await self.db.execute(
                    "INSERT INTO meta (key, value) VALUES ('app', ?), ('schema_version', ?),"
                    " (?, ?)",
                    (APP_ID, str(SCHEMA_VERSION), CHAIN_SINCE, datetime.now(UTC).isoformat()),
                )
            await self.db.execute("COMMIT")
        except BaseException as exc:
            await self._roll_back(exc)
            raise
        return await self._tables()

    async def _migrate(self) -> None:
        """Bring an older store forward, in one transaction."""
        rows = await self.db.execute_fetchall("SELECT value FROM meta WHERE key = 'schema_version'")
        version = self._version(str(next(iter(rows))[0])) if rows else SCHEMA_VERSION
        if version >= SCHEMA_VERSION:
            return
        await self.db.execute("BEGIN IMMEDIATE")
        try:
            for table, column, kind in ADDED_COLUMNS:
                info = await self.db.execute_fetchall(f"PRAGMA table_info({table})")
                if column not in {str(row[1]) for row in info}:
                    await self.db.execute(f"ALTER TABLE {table} ADD COLUMN {column} {kind}")
            for statement in SQLITE_FEED:
                await self.db.execute(statement)
            if version < 4:  # the fleet's summary of each run, read once from its events
                self.db.row_factory = sqlite3.Row
                await fill_summaries(_SqliteTx(self.db, begun=True))
            if version < 5:  # the hash chain begins now: older events carry no hash
                await self.db.execute(
                    "INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO NOTHING",
                    (CHAIN_SINCE, datetime.now(UTC).isoformat()),
                )
            if version < 8:  # decisions the runs have not taken yet, read from their logs
                # Here, not at the top: the events' classes stay off `loopdeck runs`'s path.
                from loopdeck.store.event_rows import mark_untaken

                await mark_untaken(_SqliteTx(self.db, begun=True))
            await self.db.execute(
                "UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION),)
            )
            await self.db.execute("COMMIT")
        except BaseException as exc:
            await self._roll_back(exc)
            raise

    async def _check_meta(self, tables: set[str]) -> None:
        if "meta" not in tables:
            raise StoreError(
                f"{self.path}: not a loopdeck database (it has tables {', '.join(sorted(tables))})"
            )
        rows = await self.db.execute_fetchall("SELECT key, value FROM meta")
        meta: dict[str, str] = {str(key): str(value) for key, value in rows}
        if meta.get("app") != APP_ID:
            raise StoreError(f"{self.path}: not a loopdeck database (app={meta.get('app')})")
        version = self._version(meta.get("schema_version", "0"))
        if version > SCHEMA_VERSION:
            raise StoreError(
                f"{self.path}: schema version {version} is newer than this loopdeck "
                f"understands ({SCHEMA_VERSION}); upgrade loopdeck"
            )

    def _version(self, value: str) -> int:
        try:
            return int(value)
        except ValueError:
            raise StoreError(
                f"{self.path}: schema_version {value!r} is not a number: not a loopdeck store "
                "this version can read"
            ) from None

    def explain(self, exc: Exception) -> StoreError:
        text = str(exc)
        if "locked" in text or "busy" in text:
            return StoreUnavailable(
                f"{self.path}: the database is locked by another process ({exc})",
                StoreUnavailable.LOCKED,
            )
        if "disk is full" in text or "No space left" in text:
            return StoreUnavailable(f"{self.path}: disk full ({exc})", StoreUnavailable.DISK_FULL)
        return StoreError(f"{self.path}: {exc}")

    async def fetchall(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        self.db.row_factory = sqlite3.Row
        async with self.lock:
            try:
                return list(await self.db.execute_fetchall(sql, tuple(params)))
            except sqlite3.Error as exc:
                raise self.explain(exc) from exc

    async def execute(self, sql: str, params: Sequence[Any] = ()) -> int:
        async with self.lock:
            try:
                cursor = await self.db.execute(sql, tuple(params))
                return int(cursor.rowcount)
            except sqlite3.Error as exc:
                raise self.explain(exc) from exc

    @contextlib.asynccontextmanager
    async def transaction(
        self, run_id: str | None = None, *, pipelined: bool = False
    ) -> AsyncIterator[Tx]:
        """Taken (BEGIN IMMEDIATE) with its first statement, or run whole on the connection's
        thread (`_SqliteTx.whole`): SQLite has one writer at a time, so `run_id` needs nothing
        more, and no round trips for `pipelined` to save."""
        self.db.row_factory = sqlite3.Row
        async with self.lock:
            tx = _SqliteTx(self.db)
            try:
                yield tx
                if tx.begun and not tx.committed:
                    await self.db.execute("COMMIT")
            except BaseException as exc:
                await self._roll_back(exc)
                if isinstance(exc, sqlite3.Error):
                    raise self.explain(exc) from exc
                raise

    async def _roll_back(self, cause: BaseException) -> None:
        """Undo what is left of a failed transaction. On a full disk (and some I/O errors)
        SQLite has rolled the whole transaction back itself: a ROLLBACK then fails with "no
        transaction is active", which would hide the true cause. Nothing of the transaction
        landed either way."""
        if not self.db.in_transaction:
            return
        try:
            await self.db.execute("ROLLBACK")
        except sqlite3.Error as exc:
            cause.add_note(f"and the rollback failed: {exc}")

    async def change_counter(self) -> int:
        """SQLite's own counter of commits by other connections."""
        rows = await self.fetchall("PRAGMA data_version")
        return int(rows[0][0])

    def open_beats(self, timeout_s: float) -> Beats:
        return _SqliteBeats(self.file, timeout_s)

    async def close(self) -> None:
        await self.db.close()
