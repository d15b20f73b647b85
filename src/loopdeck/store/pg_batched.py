"""A PostgreSQL transaction whose statements travel together (`Store.transaction(pipelined=
True)`, for `store/postgres.py`): each statement is held, its values bound by psycopg's
client-side cursor, until the transaction reads rows or commits; then everything held goes in
one message, several statements in one simple query. The event writer's commit (BEGIN, the
run's lock, the fence with the run's row | the rows, the runs row, COMMIT) is two round trips
instead of seven, and a claim two instead of five. Rows appended `COPY_FROM` or more at once
are held as one COPY in their place: what was held before it goes first, then the COPY, then
the rest with the read or COMMIT that sends it (a writer's commit of many events three
messages instead of six; psycopg sends a COPY alone).

psycopg's own pipeline mode does the same on the wire, but its asynchronous connection waits
on the event loop for every statement it queues: on loopback a writer's commit of one event
cost 1.2 ms of the client's CPU pipelined that way, 0.85 ms one statement at a time, 0.46 ms
batched as here (`bench/pg_commits.py`; PERFORMANCE.md, issue 43's sixth round).

A statement held is not answered until the next read or the commit: its failure is raised
there (the rest of that message is not run), and `execute` returns -1, not the rows it
changed. A failed transaction, or one whose block raised, is rolled back.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.pq import TransactionStatus

from loopdeck.store.pg_connection import COPY_FROM, Row, copy_rows, sql_of, storable, uncut

IDLE = TransactionStatus.IDLE


@dataclass(frozen=True, slots=True)
class Copying:
    """Rows held for one COPY, sent in their place among the held statements."""

    table: str
    columns: Sequence[str]
    rows: list[tuple[Any, ...]]
    more: Callable[[], list[Any]] | None = None
    ending: Callable[[], Awaitable[None]] | None = None


class BatchedTx:
    """A transaction's statements held and sent together (see above)."""

    def __init__(self, conn: psycopg.AsyncConnection[Row]) -> None:
        self.conn = conn
        self.cursor = psycopg.AsyncClientCursor(conn)
        self.held: list[str | Copying] = ["BEGIN"]

    def _hold(self, sql: str, values: tuple[Any, ...]) -> None:
        self.held.append(self.cursor.mogrify(sql_of(sql), values))

    async def execute(self, sql: str, params: Sequence[Any] = ()) -> int:
        self._hold(sql, storable(params))
        return -1  # not answered yet

    async def executemany(self, sql: str, rows: list[tuple[Any, ...]]) -> None:
        for params in rows:
            self._hold(sql, storable(params))

    async def append(self, table: str, columns: Sequence[str], rows: list[tuple[Any, ...]]) -> None:
        """Fewer than COPY_FROM rows: one multi-row INSERT, held with the rest; more: a COPY,
        held in its place (what is held before it goes in one message, the COPY, then what
        comes after). The values exactly as made: an event's row carries no NUL (its body is
        JSON) and is hashed as it is, never changed here."""
        if len(rows) >= COPY_FROM:
            self.held.append(Copying(table, columns, rows))
            return
        row = "(" + ", ".join("?" for _ in columns) + ")"
        self._hold(
            f"INSERT INTO {table} ({', '.join(columns)}) VALUES {', '.join([row] * len(rows))}",
            tuple(value for values in rows for value in values),
        )

    async def append_taking(
        self,
        table: str,
        columns: Sequence[str],
        rows: list[Any],
        more: Callable[[], list[Any]],
        ending: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        """`rows` by one COPY sent now, with what was held before it, kept open while `more()`
        gives the rows made since (`copy_rows`): they reach the server while they are made,
        not after this commit's answer. `ending` (holding statements, never reading) runs
        while the server takes the last rows. Its failure is raised here."""
        self.held.append(Copying(table, columns, rows, more, ending))
        await uncut(self._send(read=None))

    async def fetchall(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        """The rows of `sql`, sent with everything held before it."""
        self._hold(sql, storable(params))
        return await uncut(self._send(read=True))

    async def commit(self) -> None:
        self.held.append("COMMIT")
        await uncut(self._send(read=False))

    async def _send(self, *, read: bool | None) -> list[Any]:
        """Everything held, in order; ends with the read (True), the COMMIT (False), or a
        COPY (None)."""
        held, self.held = self.held, []
        statements: list[str] = []
        for item in held:
            if isinstance(item, str):
                statements.append(item)
                continue
            if statements:
                await self.cursor.execute("; ".join(statements))
                statements = []
            await copy_rows(self.conn, item.table, item.columns, item.rows, item.more, item.ending)
        if read is None:
            return []
        await self.cursor.execute("; ".join(statements))  # it ends with the read or COMMIT
        if not read:
            return []
        while self.cursor.nextset():  # the last statement's rows: the read's
            pass
        return list(await self.cursor.fetchall())


@contextlib.asynccontextmanager
async def batched_transaction(conn: psycopg.AsyncConnection[Row]) -> AsyncIterator[BatchedTx]:
    tx = BatchedTx(conn)
    try:
        yield tx
        await tx.commit()
    except BaseException:
        if not (conn.closed or conn.broken) and conn.info.transaction_status != IDLE:
            with contextlib.suppress(psycopg.Error):
                await uncut(conn.execute("ROLLBACK"))
        raise
