"""A PostgreSQL store's connections for its statements and transactions: up to `CONNECTIONS`
at once, each used by one statement or transaction at a time, opened when first needed (a
console or a command opens a second only when two of its statements overlap; a worker's runs
commit side by side instead of queueing on one connection's round trips,
`bench/workers.py`).

A connection lost is opened again by the next statement to take it, no sooner than the
backoff allows. When the server is seen to go (a statement finds it unreachable, or the
store's listener loses it) every connection opened before is replaced at its next use, idle
and maybe unaware as it is, instead of failing that statement.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any

import psycopg

from loopdeck.store.base import StoreError, StoreUnavailable
from loopdeck.store.pg_connection import Backoff, Row, connect_options, failure, not_connected, rows
from loopdeck.store.pg_waiting import LoopConnection

CONNECTIONS = 4  # a store's statements and transactions at once, each on its own connection
CLOSE_WAIT_S = 5.0  # a connection that does not close by then is left to the exit

Connection = psycopg.AsyncConnection[Row]


class Connections:
    def __init__(self, url: str, path: str, first: Connection) -> None:
        self._url, self.path = url, path
        self._idle: list[Connection] = [first]  # those no statement uses now
        self._open: set[Connection] = {first}  # every one open (for `close`)
        self._turns = asyncio.Semaphore(CONNECTIONS)
        self._backoff = Backoff()
        self.closing = False  # never opened again once set
        # Moved each time the server is seen to go; each connection's value when it opened.
        self.generation = 0
        self._born: dict[Connection, int] = {first: 0}

    @contextlib.asynccontextmanager
    async def taken(self) -> AsyncIterator[Connection]:
        """A connection for one statement or transaction, no other's meanwhile: an idle one,
        else a new one while fewer than CONNECTIONS are in use."""
        async with self._turns:
            conn = await self._ready(self._idle.pop() if self._idle else None)
            try:
                yield conn
            finally:
                if conn.closed:
                    self._forget(conn)
                else:
                    self._idle.append(conn)

    def server_lost(self) -> None:
        """Every connection open now is replaced at its next use."""
        self.generation += 1

    def failed(self, conn: Connection, exc: psycopg.Error) -> StoreError:
        """A failed statement's error; a lost server has every connection replaced."""
        error = failure(self.path, exc, conn)
        if isinstance(error, StoreUnavailable) and error.cause == StoreUnavailable.UNREACHABLE:
            self.server_lost()
        return error

    async def close(self) -> None:
        self.closing = True
        for conn in list(self._open):
            await close_connection(conn)
        self._idle.clear()

    async def _ready(self, conn: Connection | None) -> Connection:
        """`conn`, or one opened in its place if it is lost, opened before the server was
        last seen to go, or None; StoreUnavailable while the server cannot be reached."""
        if conn is not None:
            if not (conn.closed or conn.broken or self._born[conn] < self.generation):
                return conn
            self._forget(conn)
            await close_connection(conn)
        if self.closing:
            raise StoreError(f"{self.path}: the store is closed")
        now = time.monotonic()
        if self._backoff.wait_s(now) > 0:
            raise self._backoff.again()
        generation = self.generation
        try:
            conn = await LoopConnection.connect(
                self._url, autocommit=True, row_factory=rows, **connect_options(self._url)
            )
        except psycopg.Error as exc:
            error = not_connected(self.path, exc)
            self._backoff.failed(now, error)
            raise error from exc
        self._backoff.succeeded()
        self._open.add(conn)
        self._born[conn] = generation
        return conn

    def _forget(self, conn: Connection) -> None:
        self._open.discard(conn)
        self._born.pop(conn, None)


async def close_connection(conn: psycopg.AsyncConnection[Any]) -> None:
    """Closed, or left to the exit when it does not close in CLOSE_WAIT_S (a lost one)."""
    with contextlib.suppress(psycopg.Error, TimeoutError):
        await asyncio.wait_for(conn.close(), CLOSE_WAIT_S)
