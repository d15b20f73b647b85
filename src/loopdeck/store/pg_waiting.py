"""A PostgreSQL connection that waits on the event loop in fewer of its turns
(`LoopConnection`, every connection `store/postgres.py` opens).

psycopg's asynchronous connection waits for its socket through an `asyncio.Event` awaited in
a task of its own (`wait_for`, for its interval): each wait for the server costs the loop
three or four turns, and a wait to write a socket that can take the bytes costs as many. A
loop busy with a runaway's events turns once per step, so a writer's commit of seven waits
took some thirty steps' time, its batch growing meanwhile, and its rows reached the server
after the run had made them all instead of while it made the next ones (`bench/pg_store.py`).
Here a wait is one future resolved by the loop's reader (writer) callback, or none when the
socket is ready already; its interval, and an interrupted wait's cancelling of the server's
query, are psycopg's own.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import select
from select import POLLERR, POLLHUP, POLLIN, POLLOUT

import psycopg
from psycopg.abc import RV, PQGen
from psycopg.pq import TransactionStatus
from psycopg.rows import Row
from psycopg.waiting import READY_R, READY_W, WAIT_R, WAIT_W

WAIT_INTERVAL_S = 0.1  # psycopg's: a wait wakes this often, as it does
logger = logging.getLogger("psycopg")


def ready_now(fileno: int, wait: int) -> int:
    """What the socket is ready for already (0: neither), without waiting."""
    poll = select.poll()
    poll.register(fileno, (POLLIN if wait & WAIT_R else 0) | (POLLOUT if wait & WAIT_W else 0))
    ready = 0
    for _, events in poll.poll(0):
        if events & (POLLIN | POLLERR | POLLHUP):
            ready |= READY_R if wait & WAIT_R else 0
        if events & (POLLOUT | POLLERR | POLLHUP):
            ready |= READY_W if wait & WAIT_W else 0
    return ready


async def woken(loop: asyncio.AbstractEventLoop, fileno: int, wait: int, interval: float) -> int:
    """What the socket became ready for, as the loop saw it; 0 after `interval` with neither."""
    woke = loop.create_future()
    ready = 0

    def wake(state: int) -> None:
        nonlocal ready
        ready |= state
        if not woke.done():
            woke.set_result(None)

    if wait & WAIT_R:
        loop.add_reader(fileno, wake, READY_R)
    if wait & WAIT_W:
        loop.add_writer(fileno, wake, READY_W)
    timer = loop.call_later(interval, wake, 0)
    try:
        await woke
    finally:
        timer.cancel()
        if wait & WAIT_R:
            loop.remove_reader(fileno)
        if wait & WAIT_W:
            loop.remove_writer(fileno)
    return ready


async def driven(gen: PQGen[RV], fileno: int, interval: float) -> RV:
    """psycopg's generator driven to its end, each readiness it waits for taken at once when
    the socket has it, else awaited (`woken`)."""
    loop = asyncio.get_running_loop()
    try:
        wait = next(gen)
        while True:
            if not wait & (WAIT_R | WAIT_W):
                raise psycopg.InternalError(f"bad poll status: {wait}")
            ready = ready_now(fileno, wait) or await woken(loop, fileno, wait, interval)
            wait = gen.send(ready)
    except OSError as exc:
        raise psycopg.OperationalError("connection socket closed") from exc
    except StopIteration as done:
        result: RV = done.value
        return result


class LoopConnection(psycopg.AsyncConnection[Row]):
    """psycopg's connection, its waits `driven` (see above)."""

    async def wait(self, gen: PQGen[RV], interval: float | None = WAIT_INTERVAL_S) -> RV:
        if interval is None:
            raise ValueError("indefinite wait not supported anymore")  # psycopg's words
        fileno = self.pgconn.socket
        try:
            return await driven(gen, fileno, interval)
        except (asyncio.CancelledError, KeyboardInterrupt):
            # psycopg's own: the server's query cancelled, its end awaited, then raised.
            if self.pgconn.transaction_status == TransactionStatus.ACTIVE:
                try:
                    await self.cancel_safe(timeout=5.0)
                except Exception as exc:  # psycopg logs it and goes on
                    logger.warning("query cancellation failed: %s", exc)
                with contextlib.suppress(psycopg.errors.QueryCanceled):
                    await driven(gen, fileno, interval)
            raise
