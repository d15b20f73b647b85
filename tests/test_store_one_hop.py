"""A transaction run whole (`store.base.run_whole`, the event writer's batches): on SQLite its
statements and its COMMIT are one call on the connection's thread (one hop, not one a
statement); on PostgreSQL statement by statement. Either way all of it lands or none of it,
and on SQLite work that waits on anything but its statements is refused."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from loopdeck.core.events import EventBus, StateChanged
from loopdeck.core.states import RunState
from loopdeck.store.base import Location, Tx, Work, run_whole
from loopdeck.store.opening import open_store
from loopdeck.store.sqlite import SqliteStore
from loopdeck.store.writer import EventWriter


async def _count(store: Any, run_id: str) -> int:
    rows = await store.fetchall("SELECT COUNT(*) FROM events WHERE run_id = ?", (run_id,))
    return int(rows[0][0])


def _row(run_id: str, seq: int) -> tuple[Any, ...]:
    return (run_id, seq, "state_changed", "2026-01-01T00:00:00+00:00", "{}", None)


COLUMNS = ("run_id", "seq", "kind", "at", "body", "hash")


async def _whole(store: Any, work: Work[Any], run_id: str) -> Any:
    async with store.transaction(run_id) as tx:
        return await run_whole(tx, work)


async def test_a_transaction_lands_whole_or_not_at_all(db: Location) -> None:
    store = await open_store(db)
    try:

        async def work(tx: Tx) -> int:
            await tx.append("events", COLUMNS, [_row("r", n) for n in range(1, 41)])
            await tx.executemany("INSERT INTO runs (run_id, state) VALUES (?, ?)", [("r", "x")])
            rows = await tx.fetchall("SELECT COUNT(*) FROM events WHERE run_id = ?", ("r",))
            return int(rows[0][0])

        assert await _whole(store, work, "r") == 40  # its own rows, seen inside

        async def failing(tx: Tx) -> None:
            await tx.append("events", COLUMNS, [_row("r", n) for n in range(41, 81)])
            await tx.execute("UPDATE runs SET state = ? WHERE run_id = ?", ("y", "r"))
            raise ValueError("the batch's work failed")

        with pytest.raises(ValueError, match="work failed"):
            await _whole(store, failing, "r")
        assert await _count(store, "r") == 40  # the failed one landed nothing
        rows = await store.fetchall("SELECT state FROM runs WHERE run_id = ?", ("r",))
        assert rows[0][0] == "x"

        async def more(tx: Tx) -> None:
            await tx.append("events", COLUMNS, [_row("r", n) for n in range(41, 46)])

        await _whole(store, more, "r")  # the store goes on as before
        assert await _count(store, "r") == 45
    finally:
        await store.close()


async def test_work_that_waits_on_something_else_is_refused_on_sqlite(tmp_path: Path) -> None:
    store = await open_store(tmp_path / "s.db")
    try:

        async def wanders(tx: Tx) -> None:
            await tx.append("events", COLUMNS, [_row("r", 1)])
            await asyncio.sleep(0)  # not a statement of its transaction

        with pytest.raises(RuntimeError, match="other than its statements"):
            await _whole(store, wanders, "r")
        assert await _count(store, "r") == 0
    finally:
        await store.close()


async def test_a_writers_batch_is_one_hop_to_the_sqlite_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = await open_store(tmp_path / "s.db")
    assert isinstance(store, SqliteStore)
    hops: list[str] = []
    hop = store.db._execute

    async def counted(fn: Any, *args: Any, **kwargs: Any) -> Any:
        hops.append(getattr(fn, "__name__", repr(fn)))
        return await hop(fn, *args, **kwargs)

    monkeypatch.setattr(store.db, "_execute", counted)
    try:
        bus, writer = EventBus(), EventWriter(store)
        bus.subscribe(writer)
        moves = (RunState.DECIDING, RunState.EXECUTING)
        for n in range(300):
            bus.emit(StateChanged, run_id="r", source=moves[n % 2], target=moves[1 - n % 2])
        await writer.flush()
        assert hops == ["run_on_thread"]  # BEGIN, the reads, the rows, the run's row, COMMIT
        assert writer.acknowledged_seq == 300
        monkeypatch.undo()
        assert await _count(store, "r") == 300
    finally:
        await store.close()
