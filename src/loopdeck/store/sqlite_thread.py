"""A SQLite transaction run whole on its connection's own thread (`_SqliteTx.whole` in
`store/sqlite.py`): BEGIN IMMEDIATE, the work's statements (each run at once, within its
call) and the COMMIT in one call there, one hop from the event loop and one back."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from itertools import chain
from typing import Any, TypeVar

import aiosqlite

from loopdeck.store.base import Work, run_to_end

T = TypeVar("T")
# Rows appended by one INSERT (`_ThreadTx.append`): 6 columns' worth stays far below SQLite's
# limit of 32,766 parameters a statement.
ROWS_PER_INSERT = 256


class _ThreadTx:
    """A transaction's statements on the connection's own thread (`run_on_thread`):
    each one run at once, within the awaiting call, so the work never waits on the loop."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    async def execute(self, sql: str, params: Sequence[Any] = ()) -> int:
        return int(self.conn.execute(sql, tuple(params)).rowcount)

    async def executemany(self, sql: str, rows: list[tuple[Any, ...]]) -> None:
        self.conn.executemany(sql, rows)

    async def append(self, table: str, columns: Sequence[str], rows: list[tuple[Any, ...]]) -> None:
        """ROWS_PER_INSERT rows a statement: SQLite inserts them all in one step, during which
        Python's other threads run (the runtime making the next batch); one statement a row
        (`executemany`) takes the GIL back between every two rows. The rest one a row."""
        insert = f"INSERT INTO {table} ({', '.join(columns)}) VALUES "
        marks = "(" + ", ".join("?" for _ in columns) + ")"
        whole = len(rows) - len(rows) % ROWS_PER_INSERT
        if whole:
            many = insert + ", ".join([marks] * ROWS_PER_INSERT)
            for start in range(0, whole, ROWS_PER_INSERT):
                self.conn.execute(
                    many, list(chain.from_iterable(rows[start : start + ROWS_PER_INSERT]))
                )
        if whole < len(rows):
            self.conn.executemany(insert + marks, rows[whole:])

    async def fetchall(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        return list(self.conn.execute(sql, tuple(params)).fetchall())


def run_on_thread(db: aiosqlite.Connection, work: Work[T]) -> T:
    """On the connection's thread: BEGIN IMMEDIATE, `work` driven to its end (it awaits only
    `_ThreadTx`'s statements, which never suspend), COMMIT; rolled back on any failure."""
    conn: sqlite3.Connection = db._conn  # aiosqlite's connection, on the thread that owns it
    conn.execute("BEGIN IMMEDIATE")
    try:
        result = run_to_end(work(_ThreadTx(conn)))
        conn.execute("COMMIT")
    except BaseException as exc:
        if conn.in_transaction:
            try:
                conn.execute("ROLLBACK")
            except sqlite3.Error as failed:
                exc.add_note(f"and the rollback failed: {failed}")
        raise
    return result
