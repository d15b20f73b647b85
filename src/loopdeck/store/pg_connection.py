"""PostgreSQL connections that outlive their server (for `store/postgres.py`).

How a connection is opened (a short connect timeout and TCP keepalives, so a server that is
gone is noticed in seconds), how a failure is told apart (the server unreachable or its disk
full, waited out as `StoreUnavailable`; a login the server refuses, `StoreRefused`; anything
else is the statement's own error), and the pace of reconnecting (`Backoff`). `PgTx` runs
statements on one connection, rows read by name or position; `PgBeats` is the heartbeat
thread's connection, which reconnects the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any, TypeVar

import psycopg
from psycopg.conninfo import conninfo_to_dict

from loopdeck.store.base import PIPELINED_ROWS, StoreError, StoreRefused, StoreUnavailable
from loopdeck.store.leases import BEAT_HELD, RENEW
from loopdeck.store.presence import BEAT_WORKER

CONNECT_TIMEOUT_S = 3  # libpq counts whole seconds, at least 2
# An established connection whose server vanished (a host down, a network cut) fails within
# about ten seconds instead of TCP's many minutes.
KEEPALIVES = {
    "keepalives": 1,
    "keepalives_idle": 5,
    "keepalives_interval": 2,
    "keepalives_count": 3,
    "tcp_user_timeout": 10_000,
}
BACKOFF_FIRST_S = 0.1
BACKOFF_MAX_S = 1.0
# A refused login lasts until someone changes the credentials: tried again less often (each
# try is a line in the server's log), still soon enough to notice the credentials fixed.
REFUSED_BACKOFF_MAX_S = 5.0
# The server ended the connection: shut down (fast or immediate), crashed, or starting up.
SERVER_GONE = frozenset({"57P01", "57P02", "57P03"})
DISK_FULL = "53100"
# The server refused the login (class 28: invalid authorization). libpq reports a failed
# connection without its SQLSTATE, so the words of the server's (or libpq's) refusal count too.
LOGIN_REFUSED = frozenset({"28000", "28P01"})
REFUSAL_WORDS = re.compile(
    r"authentication failed|no pg_hba\.conf entry|pg_hba\.conf rejects|no password supplied"
    r"|is not permitted to log in|role \".*\" does not exist"
)
# Rows appended by one multi-row INSERT (one round trip) below this, by COPY from it on.
COPY_FROM = PIPELINED_ROWS
# The column types of the tables appended by COPY, as the schema declares them
# (`store/base.py`; tests/test_pg_copy.py reads them back from the server): their rows go in
# binary COPY, each value encoded by psycopg's own dumper for its column's type. Another
# table's rows go in COPY's text format, encoded by psycopg all the same.
COPY_TYPES: dict[str, dict[str, str]] = {
    "events": {
        "run_id": "text", "seq": "int4", "kind": "text", "at": "text", "body": "text",
        "origin": "text", "hash": "text",
    },
}  # fmt: skip


def connect_options(url: str) -> dict[str, Any]:
    """The timeouts loopdeck connects with, unless the URL sets its own."""
    try:
        given = conninfo_to_dict(url)
    except psycopg.Error:
        given = {}
    return {
        key: value
        for key, value in {"connect_timeout": CONNECT_TIMEOUT_S, **KEEPALIVES}.items()
        if key not in given
    }


def said(exc: BaseException) -> str:
    """libpq's message on one line (it indents its hints on lines of their own)."""
    return " ".join(str(exc).split()) or type(exc).__name__


def login_refusal(exc: psycopg.Error) -> str | None:
    """The server's reason when it refused loopdeck's login ("password authentication failed
    for user "loopdeck""), else None."""
    text = said(exc)
    if (exc.sqlstate or "") not in LOGIN_REFUSED and not REFUSAL_WORDS.search(text):
        return None
    # libpq: 'connection failed: connection to server at "h", port 5432 failed: FATAL:  …'
    return text.rsplit(" failed: ", 1)[-1].removeprefix("FATAL:").strip() or text


def cause_of(exc: psycopg.Error, conn: Any) -> str | None:
    """Why a statement failed when it is the store's condition, not the statement's fault:
    StoreUnavailable.UNREACHABLE, DISK_FULL or REFUSED; None for the statement's own error."""
    state = exc.sqlstate or ""
    if state == DISK_FULL:
        return StoreUnavailable.DISK_FULL
    if state in LOGIN_REFUSED:
        return StoreUnavailable.REFUSED
    if conn is not None and (conn.closed or conn.broken):
        return StoreUnavailable.UNREACHABLE
    if isinstance(exc, psycopg.InterfaceError) or state.startswith("08") or state in SERVER_GONE:
        return StoreUnavailable.UNREACHABLE
    if isinstance(exc, psycopg.OperationalError) and not state:
        return StoreUnavailable.UNREACHABLE  # libpq's own: the socket closed, a timeout
    return None


def failure(path: str, exc: psycopg.Error, conn: Any) -> StoreError:
    """The error a failed statement is reported as."""
    cause = cause_of(exc, conn)
    if cause == StoreUnavailable.UNREACHABLE:
        return unreachable(path, said(exc))
    if cause == StoreUnavailable.REFUSED:
        return refused(path, login_refusal(exc) or said(exc))
    if cause is not None:
        return StoreUnavailable(f"{path}: {cause}: {said(exc)}", cause)
    return StoreError(f"{path}: {type(exc).__name__}: {exc}".strip())


def unreachable(path: str, why: str) -> StoreUnavailable:
    return StoreUnavailable(f"{path}: server unreachable: {why}", StoreUnavailable.UNREACHABLE)


def refused(path: str, why: str) -> StoreRefused:
    return StoreRefused(f"{path}: the store refuses loopdeck's login: {why}", why)


def not_connected(path: str, exc: psycopg.Error) -> StoreUnavailable:
    """Why a connection could not be opened: its login refused, else its server unreachable."""
    why = login_refusal(exc)
    return unreachable(path, said(exc)) if why is None else refused(path, why)


def sql_of(statement: str) -> str:
    """The shared SQL in psycopg's placeholders."""
    return statement.replace("%", "%%").replace("?", "%s")


class Row(tuple[Any, ...]):
    """A row read by column name or by position, like sqlite3.Row."""

    names: dict[str, int]

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, str):
            return tuple.__getitem__(self, self.names[key])
        return tuple.__getitem__(self, key)

    def keys(self) -> list[str]:
        return list(self.names)


def rows(cursor: Any) -> Callable[[Sequence[Any]], Row]:
    names = {column.name: i for i, column in enumerate(cursor.description or [])}

    def make(values: Sequence[Any]) -> Row:
        row = Row(values)
        row.names = names
        return row

    return make


T = TypeVar("T")


# Statements whose callers may have stopped waiting, held until they end.
_finishing: set[asyncio.Task[None]] = set()


async def uncut(statement: Coroutine[Any, Any, T]) -> T:
    """A statement is never cut in the middle: a caller cancelled while it runs stops
    waiting, and the statement finishes on its own (psycopg's connection lock keeps the next
    one behind it). A query cut mid-protocol could leave the connection waiting forever.
    `asyncio.shield`'s promise, the answer set by the statement's task itself as it ends: its
    caller resumes a turn of the loop sooner (a busy loop turns once per step of a run)."""
    loop = asyncio.get_running_loop()
    answer: asyncio.Future[T] = loop.create_future()

    async def run() -> None:
        try:
            result = await statement
        except asyncio.CancelledError:  # the loop's end cancelled it: so is its caller
            answer.cancel()
            raise
        except BaseException as exc:
            if not answer.done():
                answer.set_exception(exc)
            if not isinstance(exc, Exception):
                raise  # KeyboardInterrupt, SystemExit: the loop's, as from any task
        else:
            if not answer.done():
                answer.set_result(result)

    def ended(task: asyncio.Task[None]) -> None:
        _finishing.discard(task)
        if not answer.done():  # cancelled before it began (the loop's end)
            answer.cancel()
            statement.close()

    task = loop.create_task(run())
    _finishing.add(task)
    task.add_done_callback(ended)
    return await answer


def storable(params: Sequence[Any]) -> tuple[Any, ...]:
    """A statement's values as PostgreSQL's text can hold them: it holds no NUL, which psycopg
    refuses to send, failing the whole transaction (a run's commit, over a NUL in a finding a
    model wrote). A NUL in a text value is stored as U+FFFD. An event's own row is JSON, where
    a NUL is escaped (`\\u0000`): the log keeps the text exactly; only the runs, approvals and
    commands rows, read for people, show the replacement (SQLite stores a NUL as it is)."""
    if not any(type(value) is str and "\x00" in value for value in params):
        return tuple(params)
    return tuple(
        value.replace("\x00", "\ufffd") if type(value) is str else value for value in params
    )


async def copy_rows(
    conn: psycopg.AsyncConnection[Row],
    table: str,
    columns: Sequence[str],
    rows: list[Any],
    more: Callable[[], list[Any]] | None = None,
    ending: Callable[[], Awaitable[None]] | None = None,
) -> None:
    """`rows` appended to `table` by one COPY: binary, each value encoded by psycopg's dumper
    for its column's type, for a table of `COPY_TYPES`; psycopg's text format for another.
    With `more`, the COPY stays open while it gives rows, asked again after each turn of the
    loop: rows made meanwhile reach the server as they are made. `ending` is awaited once the
    last row is sent, before the COPY's end is: its work is done while the server is still
    taking the rows (its failure fails the COPY)."""
    types = COPY_TYPES.get(table)
    binary = " (FORMAT BINARY)" if types is not None else ""
    copying = f"COPY {table} ({', '.join(columns)}) FROM STDIN{binary}"
    async with conn.cursor() as cursor, cursor.copy(copying) as copy:
        if types is not None:
            copy.set_types([types[column] for column in columns])
        for values in rows:
            await copy.write_row(values)
        while more is not None:
            await asyncio.sleep(0)  # the loop's turn: its producers make the next rows
            if not (rows := more()):
                break
            for values in rows:
                await copy.write_row(values)
        if ending is not None:
            await ending()


class PgTx:
    def __init__(self, conn: psycopg.AsyncConnection[Row]) -> None:
        self.conn = conn

    async def execute(self, sql: str, params: Sequence[Any] = ()) -> int:
        return await uncut(self._execute(sql, params))

    async def executemany(self, sql: str, rows: list[tuple[Any, ...]]) -> None:
        await uncut(self._executemany(sql, rows))

    async def fetchall(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        return await uncut(self._fetchall(sql, params))

    async def append(self, table: str, columns: Sequence[str], rows: list[tuple[Any, ...]]) -> None:
        await uncut(self._append(table, columns, rows))

    async def _execute(self, sql: str, params: Sequence[Any]) -> int:
        cursor = await self.conn.execute(sql_of(sql), storable(params))
        return int(cursor.rowcount)

    async def _executemany(self, sql: str, rows: list[tuple[Any, ...]]) -> None:
        async with self.conn.cursor() as cursor:
            await cursor.executemany(sql_of(sql), [storable(row) for row in rows])

    async def _append(
        self, table: str, columns: Sequence[str], rows: list[tuple[Any, ...]]
    ) -> None:
        if len(rows) >= COPY_FROM:
            await copy_rows(self.conn, table, columns, rows)
            return
        row = "(" + ", ".join("%s" for _ in columns) + ")"
        await self.conn.execute(
            f"INSERT INTO {table} ({', '.join(columns)}) VALUES {', '.join([row] * len(rows))}",
            [value for values in rows for value in values],
        )

    async def _fetchall(self, sql: str, params: Sequence[Any]) -> list[Any]:
        cursor = await self.conn.execute(sql_of(sql), storable(params))
        return list(await cursor.fetchall())


class Backoff:
    """When a connection may next be attempted: at once after a loss, then after waits that
    double from BACKOFF_FIRST_S up to BACKOFF_MAX_S while attempts fail (REFUSED_BACKOFF_MAX_S
    while the login is refused)."""

    def __init__(self) -> None:
        self.delay_s = 0.0
        self.next_at = 0.0
        self.last: StoreUnavailable | None = None

    def wait_s(self, now: float) -> float:
        return max(0.0, self.next_at - now)

    def failed(self, now: float, error: StoreUnavailable) -> None:
        longest = REFUSED_BACKOFF_MAX_S if isinstance(error, StoreRefused) else BACKOFF_MAX_S
        self.delay_s = min(max(2 * self.delay_s, BACKOFF_FIRST_S), longest)
        self.next_at = now + self.delay_s
        self.last = error

    def again(self) -> StoreUnavailable:
        """What a connection asked for before its next attempt is due raises: the last
        failure (a refused login in the same words)."""
        last = self.last or StoreUnavailable("connection lost", StoreUnavailable.UNREACHABLE)
        if isinstance(last, StoreRefused):
            return StoreRefused(str(last), last.why)
        return StoreUnavailable(f"{last}; retrying", last.cause)

    def succeeded(self) -> None:
        self.delay_s, self.next_at, self.last = 0.0, 0.0, None


class PgBeats:
    """The heartbeat thread's own blocking connection, opened at the first beat and again
    after the server went away: a beat that finds it gone raises StoreUnavailable (the
    heartbeat tries again at its next beat), and the next beat reconnects."""

    def __init__(self, url: str, path: str, timeout_s: float) -> None:
        self.url = url
        self.path = path
        self.options = connect_options(url) | {
            "connect_timeout": max(2, int(timeout_s)),
            "tcp_user_timeout": max(5000, int(timeout_s * 5000)),
        }
        self.conn: psycopg.Connection[Any] | None = None
        self.backoff = Backoff()

    def _connection(self) -> psycopg.Connection[Any]:
        conn = self.conn
        if conn is not None and not (conn.closed or conn.broken):
            return conn
        self.close()
        now = time.monotonic()
        if self.backoff.wait_s(now) > 0:
            raise self.backoff.again()
        try:
            self.conn = psycopg.connect(self.url, autocommit=True, **self.options)
        except psycopg.Error as exc:
            error = not_connected(self.path, exc)
            self.backoff.failed(now, error)
            raise error from exc
        self.backoff.succeeded()
        return self.conn

    def beat(self, run_id: str, at: float) -> None:
        conn = self._connection()
        try:
            conn.execute("UPDATE runs SET heartbeat_at = %s WHERE run_id = %s", (at, run_id))
        except psycopg.Error as exc:
            error = failure(self.path, exc, conn)
            if isinstance(error, StoreUnavailable):
                self.close()  # the next beat opens a new one
            raise error from exc

    def renew(
        self, holder: str, until: float, at: float, itself: Sequence[Any]
    ) -> list[tuple[str, int]]:
        conn = self._connection()
        try:
            with conn.transaction():
                held = conn.execute(sql_of(RENEW), (until, holder)).fetchall()
                conn.execute(sql_of(BEAT_HELD), (at, holder))
                conn.execute(sql_of(BEAT_WORKER), tuple(itself))
        except psycopg.Error as exc:
            error = failure(self.path, exc, conn)
            if isinstance(error, StoreUnavailable):
                self.close()  # the next renewal opens a new one
            raise error from exc
        return [(str(run_id), int(epoch)) for run_id, epoch in held]

    def close(self) -> None:
        conn, self.conn = self.conn, None
        if conn is not None:
            with contextlib.suppress(psycopg.Error):  # one already gone has nothing to close
                conn.close()
