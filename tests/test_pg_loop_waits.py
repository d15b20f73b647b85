"""PostgreSQL's waits on the event loop (issue 43, `store/pg_waiting.py`): a statement whose
caller is cancelled still finishes on its own (`uncut`); a statement waiting on the server
when its own task is cancelled has its query cancelled there, as psycopg's connection does,
and the connection goes on; a wait with nothing to read ends with its interval."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import psycopg
import pytest
from conftest import fresh_pg_database, pg_cluster

from loopdeck.store.base import Store
from loopdeck.store.opening import open_store
from loopdeck.store.pg_waiting import LoopConnection

pytestmark = pytest.mark.usefixtures("pg")
LOCK = 4343  # an advisory lock a test's other connection holds


@pytest.fixture
def pg() -> None:
    pg_cluster()  # skips the module where PostgreSQL cannot be started


@pytest.fixture
async def url(monkeypatch: pytest.MonkeyPatch) -> str:
    return fresh_pg_database(monkeypatch)


@pytest.fixture
async def store(url: str) -> AsyncIterator[Store]:
    opened = await open_store(url)
    try:
        yield opened
    finally:
        await opened.close()


async def until(condition: object, what: str) -> None:
    """Polls `condition` (an async callable) until it holds; a minute at most."""
    for _ in range(6000):
        if await condition():  # type: ignore[operator]
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"never: {what}")


async def waiting_on_lock(url: str) -> bool:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        cursor = await conn.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
        )
        row = await cursor.fetchone()
        return row is not None and row[0] > 0


async def test_a_statement_whose_caller_is_cancelled_finishes_on_its_own(
    store: Store, url: str
) -> None:
    await store.execute(
        "INSERT INTO meta (key, value) VALUES ('uncut', 'before')"
        " ON CONFLICT (key) DO UPDATE SET value = excluded.value"
    )
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as holder:
        await holder.execute(f"SELECT pg_advisory_lock({LOCK})")
        caller = asyncio.create_task(
            store.execute(
                f"WITH held AS (SELECT pg_advisory_xact_lock({LOCK}))"
                " UPDATE meta SET value = 'after' FROM held WHERE key = 'uncut'"
            )
        )
        await until(lambda: waiting_on_lock(url), "the statement waits on the lock")
        caller.cancel()
        with pytest.raises(asyncio.CancelledError):
            await caller  # the caller stops waiting at once, the lock still held
        assert await waiting_on_lock(url)  # its statement still waits, uncut
        await holder.execute(f"SELECT pg_advisory_unlock({LOCK})")

    async def landed() -> bool:
        rows = await store.fetchall("SELECT value FROM meta WHERE key = 'uncut'")
        return bool(rows[0][0] == "after")

    await until(landed, "the statement finished on its own")


async def test_a_wait_cancelled_with_its_task_cancels_the_query_and_the_connection_goes_on(
    url: str,
) -> None:
    async with (
        await psycopg.AsyncConnection.connect(url, autocommit=True) as holder,
        await LoopConnection.connect(url, autocommit=True) as conn,
    ):
        await holder.execute(f"SELECT pg_advisory_lock({LOCK})")
        waiting = asyncio.create_task(conn.execute(f"SELECT pg_advisory_lock({LOCK})"))
        await until(lambda: waiting_on_lock(url), "the statement waits on the lock")
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        assert not await waiting_on_lock(url)  # its query was cancelled on the server
        cursor = await conn.execute("SELECT 1")
        assert await cursor.fetchone() == (1,)  # and the connection answers
        await holder.execute(f"SELECT pg_advisory_unlock({LOCK})")


async def test_a_wait_with_nothing_to_read_ends_with_its_interval(url: str) -> None:
    """psycopg's notifies(timeout=...) relies on the wait handing its generator "not ready"
    after its interval: the store's listener listens in such slices."""
    async with await LoopConnection.connect(url, autocommit=True) as conn:
        await conn.execute("LISTEN nothing_comes")
        got = [notify async for notify in conn.notifies(timeout=0.05)]
        assert got == []
        await conn.execute("NOTIFY nothing_comes, 'now'")
        got = [notify.payload async for notify in conn.notifies(timeout=5, stop_after=1)]
        assert got == ["now"]
