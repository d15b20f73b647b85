"""What every store is, whichever engine holds it: the `Store` interface both backends
implement (`store/sqlite.py`, `store/postgres.py`), the schema they share, and where a store is
(`Location`: a SQLite file or a `postgresql://` URL). `store/opening.py` picks the backend.

Queries are written once, in the SQL both engines speak (`?` placeholders, `ON CONFLICT`
upserts); a backend translates what it must.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import urllib.parse
from collections.abc import Callable, Coroutine, Sequence
from pathlib import Path
from typing import Any, Protocol, TypeVar

import platformdirs

from loopdeck import settings

SCHEMA_VERSION = 10
APP_ID = "loopdeck"
# Rows appended at once below this go in one INSERT on PostgreSQL, as many or more by COPY
# (in a pipelined transaction, held in their place: `store/pg_batched.py`).
PIPELINED_ROWS = 32
# v10: the `workers` table, which workers run for the store (`store/presence.py`).
# v9: the leases' `unmovable`, why a run cannot go on in another worker (`leases.pin`).
# v8: the approvals' `untaken`, a decision the store took that the run has not taken yet.
# v7: the leases' `changed`, where each run is fed to the fleet as its runs row is
# (`store/feed.py`): the column, its index and its triggers, made by the opening's migration.
# v6: the `leases` table, runs placed on workers (`store/leases.py`).
# v5: each event's `hash`, its link in its run's hash chain (`store/chain.py`). The meta key
# CHAIN_SINCE holds when the store's chain began (its creation, or its migration to v5):
# events without a hash from before then are reported unverified, never as intact.
CHAIN_SINCE = "chain_since"

# v4: what the fleet shows of a run, kept on its row (`store/feed.py`): the run's summary,
# written once per batch by its writer, and `changed`, the run's change number, which only
# moves forward; a follower reads `WHERE changed >= its cursor` instead of every run.
RUN_SUMMARY = (
    ("last_seq", "BIGINT DEFAULT 0"),
    ("usage", "TEXT"),  # the last budget_updated's usage (JSON)
    ("last_finding", "TEXT"),
    ("paused", "INTEGER DEFAULT 0"),
    ("guard_repeats", "BIGINT DEFAULT 0"),
    ("pending", "BIGINT DEFAULT 0"),  # requests waiting (writes and questions)
    ("soonest_expiry", "TEXT"),
    ("changed", "BIGINT"),
)
RUN_SUMMARY_COLUMNS = "".join(f", {column} {kind}" for column, kind in RUN_SUMMARY)

# Columns added since version 1, by the version that added them: an older store gains them
# when it is opened (`ALTER TABLE … ADD COLUMN`), in the opening's transaction.
ADDED_COLUMNS = (
    ("runs", "pid_started", "TEXT"),
    ("events", "origin", "TEXT"),
    ("approvals", "edited_args", "TEXT"),  # v3: the operator's edit of a write's arguments
    ("approvals", "grant_rule", "TEXT"),  # v3: the grant given with an approval (JSON)
    *(("runs", column, kind) for column, kind in RUN_SUMMARY),  # v4
    ("events", "hash", "TEXT"),  # v5: the event's link in its run's hash chain
    ("leases", "changed", "BIGINT"),  # v7: where a run is, fed to the fleet
    ("approvals", "untaken", "INTEGER"),  # v8: see UNTAKEN
    ("leases", "unmovable", "TEXT"),  # v9: see `leases.pin`
)

# The tables both backends define alike (the others differ in number types and identity).
SHARED_TABLES = """
CREATE TABLE IF NOT EXISTS events (
    run_id TEXT NOT NULL, seq INTEGER NOT NULL, kind TEXT NOT NULL, at TEXT NOT NULL,
    body TEXT NOT NULL, origin TEXT, hash TEXT, PRIMARY KEY (run_id, seq)
);
CREATE TABLE IF NOT EXISTS approvals (
    run_id TEXT NOT NULL, call_id TEXT NOT NULL, tool TEXT, args TEXT, requested_at TEXT,
    expires_at TEXT, state TEXT NOT NULL, decided_by TEXT, reason TEXT, decided_at TEXT,
    outcome TEXT, edited_args TEXT, grant_rule TEXT, untaken INTEGER,
    PRIMARY KEY (run_id, call_id)
);
"""


# An approval row whose decision its run took and found no longer covering the call (its state
# or arguments moved, an edit refused: `approval_invalidated`): the call is asked again, its
# next asking replacing the row (`store/event_rows.py`).
INVALIDATED = "invalidated"
# An approval row's `untaken`: 1 from the store taking a decision on it (`loopdeck approve`, a
# console) until its run takes that decision (`approval_decided`). Only such a decision
# outlives the run's next asking of the call; one the run took (NULL: every older row too) is
# replaced by it, pending, so nobody's old answer decides a new asking.
UNTAKEN = "untaken"
# An approval row's `outcome` in a fork, for a write of its source whose outcome was unknown
# when the fork's env was restored to the state seen after it (`RunForked.settled`).
RESTORED = "restored"


class StoreError(Exception):
    """The store cannot be used; the message names the file and the problem."""


# How much of a run id a message repeats (one that is not there may be a pasted page).
RUN_ID_SHOWN = 100


class StoreUnavailable(StoreError):
    """The store is there but cannot take a write for now: its server is unreachable, another
    process holds its write lock, or its disk is full. Waited out and retried, never a crash;
    `cause` names which, for the operator."""

    UNREACHABLE = "unreachable"
    LOCKED = "locked"
    DISK_FULL = "disk full"
    REFUSED = "login refused"

    def __init__(self, message: str, cause: str) -> None:
        super().__init__(message)
        self.cause = cause


class StoreRefused(StoreUnavailable):
    """The store's server answers but refuses loopdeck's login: a changed password, a role
    or `pg_hba.conf` entry removed, a role that may not log in. Not a server out of reach:
    it lasts until someone changes the credentials, so it is said by name, logins are tried
    at a slower pace, a run holds and stops after its bound, and a decision is refused at
    once instead of waited out."""

    def __init__(self, message: str, why: str = "") -> None:
        super().__init__(message, StoreUnavailable.REFUSED)
        self.why = why  # the server's words ("password authentication failed for user …")


# Where a store is: a SQLite file, or a PostgreSQL URL (`postgresql://user@host/db`).
Location = Path | str

PG_SCHEMES = ("postgresql://", "postgres://")
DB_HELP = (
    "event store: a SQLite file or postgresql://USER@HOST/DB"
    " (default: LOOPDECK_DB, else a file in the user data dir)"
)


def is_postgres(location: Location | None) -> bool:
    return isinstance(location, str) and location.startswith(PG_SCHEMES)


def store_location(text: str) -> Location:
    """`--db` and LOOPDECK_DB: a PostgreSQL URL stays text (a Path would fold its `//`)."""
    return text if text.startswith(PG_SCHEMES) else Path(text).expanduser()


def redact(url: str) -> str:
    """A PostgreSQL URL as people may see it: no password, in the netloc or the query."""
    parts = urllib.parse.urlsplit(url)
    netloc = parts.netloc
    if "@" in netloc:
        credentials, host = netloc.rsplit("@", 1)
        netloc = f"{credentials.split(':', 1)[0]}@{host}"
    query = urllib.parse.urlencode(
        [(k, v) for k, v in urllib.parse.parse_qsl(parts.query) if k != "password"]
    )
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def shown_location(location: Location | None) -> str:
    """Where a store is, for a screen or a message: a URL never with its password."""
    if location is None:
        return ""
    return redact(str(location)) if is_postgres(location) else str(location)


def made_store(location: Location) -> tuple[str, ...]:
    """What a command says when it is to make its store (`loopdeck console` as it opens,
    `loopdeck run` once its preparation made it, `loopdeck serve`): made where `--db` points,
    its folder too (the console starts runs there, `n`), but never silently: a mistyped path
    shows at once. Asked before the store is made."""
    if is_postgres(location) or os.path.lexists(location):
        return ()
    folder = (
        "" if os.path.isdir(os.path.dirname(os.path.abspath(location))) else " (its folder too)"
    )
    return (f"no store was at {location}: made a new, empty one{folder}",)


def data_folder() -> Path:
    """loopdeck's own folder in the user's data dir, kept 0700 (`store/files.py`)."""
    return Path(platformdirs.user_data_dir("loopdeck"))


def default_db_path() -> Location:
    configured = settings.current().db
    if configured:
        return store_location(configured)
    return data_folder() / "loopdeck.db"


class Tx(Protocol):
    """One open transaction: statements, their changed-row counts, rows by name or index."""

    async def execute(self, sql: str, params: Sequence[Any] = ()) -> int: ...
    async def executemany(self, sql: str, rows: list[tuple[Any, ...]]) -> None: ...
    async def fetchall(self, sql: str, params: Sequence[Any] = ()) -> list[Any]: ...
    async def append(self, table: str, columns: Sequence[str], rows: list[tuple[Any, ...]]) -> None:
        """Many new rows into `table` at once, the engine's fastest way (PostgreSQL: COPY)."""
        ...


T = TypeVar("T")
# What a transaction does, given it: its statements, awaited one after another, and nothing else.
Work = Callable[[Tx], Coroutine[Any, Any, T]]


async def run_whole(tx: Tx, work: Work[T]) -> T:
    """`work` on an open transaction, in one go where the transaction can (SQLite's `whole`:
    its statements and its COMMIT in one call on the connection's thread), else statement by
    statement; `work` awaits its transaction's statements and nothing else."""
    whole = getattr(tx, "whole", None)
    if whole is None:
        return await work(tx)
    done: T = await whole(work)
    return done


def run_to_end(running: Coroutine[Any, Any, T]) -> T:
    """A transaction's work driven to its end where it is (a store's thread), its result: its
    statements run within their calls there, so it never suspends; one that does waited on
    something else, and is refused."""
    try:
        running.send(None)
    except StopIteration as done:
        result: T = done.value
        return result
    running.close()
    raise RuntimeError("a store transaction's work waited on something other than its statements")


class Beats(Protocol):
    """A blocking connection for the heartbeat thread."""

    def beat(self, run_id: str, at: float) -> None: ...
    def renew(
        self, holder: str, until: float, at: float, itself: Sequence[Any]
    ) -> list[tuple[str, int]]:
        """A worker's leases and its own row (`itself`: `presence.beat_params`) pushed to
        `until`, its runs' heartbeats to `at`, in one transaction: the (run, epoch) of each
        run it still holds (`store/leases.py`, `store/presence.py`)."""
        ...

    def close(self) -> None: ...


class Store:
    """One open store. Queries live in `queries`; a backend owns the connection.

    `path` names the store for people: the SQLite file, or the PostgreSQL URL without its
    password (credentials are never stored or printed)."""

    path: Location
    backend = ""
    # What opening it did that people should hear of (spilled events brought back).
    notes: list[str] = []  # replaced when opened, never appended to
    # One connection, many coroutines: a statement never lands inside another's transaction.
    lock: asyncio.Lock

    async def fetchall(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        raise NotImplementedError

    async def execute(self, sql: str, params: Sequence[Any] = ()) -> int:
        """Run one statement in its own transaction; returns the rows it changed."""
        raise NotImplementedError

    def transaction(
        self, run_id: str | None = None, *, pipelined: bool = False
    ) -> contextlib.AbstractAsyncContextManager[Tx]:
        """One write transaction: all of it lands or none. With `run_id`, writers of that run's
        events (its runner, a reader marking it crashed) take their turns one at a time.
        `pipelined`: its statements are held and sent together at its next read or its
        COMMIT (PostgreSQL, `store/pg_batched.py`: the event writer's few statements in two
        round trips, not seven), so a statement's failure is raised there and `execute`
        returns -1, not the rows it changed; its appends go by INSERT, for fewer rows than
        `PIPELINED_ROWS`, else by a COPY between what was held before and what comes after.
        SQLite, in-process, has no round trips to save."""
        raise NotImplementedError

    async def change_counter(self) -> int:
        """A number that moves when another connection committed something."""
        raise NotImplementedError

    async def runs_changed(self, columns: Sequence[str], since: int) -> tuple[list[Any], int]:
        """The runs rows whose `changed` is at least `since` (with `columns`, `changed` among
        them), and the `since` of the next read: a follower's cursor. Here (one writer at a
        time, numbers given in commit order) the highest number read, plus one."""
        rows = await self.fetchall(
            f"SELECT {', '.join(columns)} FROM runs WHERE changed >= ?", (since,)
        )
        return rows, max((int(row["changed"]) + 1 for row in rows), default=since)

    async def wait_for_change(self, timeout_s: float) -> None:
        """Return when another connection may have committed something, or after timeout_s."""
        await asyncio.sleep(timeout_s)

    def open_beats(self, timeout_s: float) -> Beats:
        raise NotImplementedError

    def explain(self, exc: Exception) -> StoreError:
        return StoreError(f"{self.path}: {exc}")

    async def close(self) -> None:
        raise NotImplementedError
