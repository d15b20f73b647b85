"""The writer commits a full batch at once, whatever the batch interval: the producer's
BATCH_MAX-th queued event wakes it (once a batch, not once an event)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest

from loopdeck.core.events import EventBus, StateChanged
from loopdeck.core.states import RunState
from loopdeck.store import writer as writer_module
from loopdeck.store.opening import open_store
from loopdeck.store.writer import BATCH_MAX, EventWriter


async def _until(condition: Callable[[], bool], what: str) -> None:
    for _ in range(12_000):  # bounded by tries, each one a short wait for the writer's loop
        if condition():
            return
        await asyncio.sleep(0.005)
    raise AssertionError(f"never: {what}")


async def test_full_batches_are_committed_without_waiting_for_the_interval(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(writer_module, "BATCH_INTERVAL_S", 3600.0)  # only a full batch commits
    store = await open_store(tmp_path / "s.db")
    try:
        bus, writer = EventBus(), EventWriter(store)
        bus.subscribe(writer)
        writer.start()
        moves = (RunState.DECIDING, RunState.EXECUTING)

        def emit(count: int) -> None:
            for _ in range(count):
                n = bus.last_seq
                bus.emit(StateChanged, run_id="r", source=moves[n % 2], target=moves[1 - n % 2])

        emit(BATCH_MAX)
        await _until(lambda: writer.acknowledged_seq == BATCH_MAX, "the first batch committed")
        emit(BATCH_MAX - 1)
        emit(1)  # full again
        await _until(lambda: writer.acknowledged_seq == 2 * BATCH_MAX, "the second one too")
        emit(1)  # committed at the close
        await writer.close()
        rows = await store.fetchall("SELECT COUNT(*) FROM events WHERE run_id = ?", ("r",))
        assert writer.acknowledged_seq == rows[0][0] == 2 * BATCH_MAX + 1
    finally:
        await store.close()


async def test_a_runs_first_batch_is_committed_at_once_when_its_start_is_awaited(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker claims its next run once this one's start is in the store (`on_first_commit`):
    that first batch does not wait out the interval; the batches after it do."""
    monkeypatch.setattr(writer_module, "BATCH_INTERVAL_S", 3600.0)
    store = await open_store(tmp_path / "s.db")
    try:
        bus, writer = EventBus(), EventWriter(store)
        told: list[int] = []
        writer.on_first_commit = lambda: told.append(1)
        bus.subscribe(writer)
        writer.start()
        bus.emit(StateChanged, run_id="r", source=RunState.DECIDING, target=RunState.EXECUTING)
        bus.emit(StateChanged, run_id="r", source=RunState.EXECUTING, target=RunState.DECIDING)
        await _until(lambda: writer.acknowledged_seq == 2, "the run's first batch committed")
        bus.emit(StateChanged, run_id="r", source=RunState.DECIDING, target=RunState.EXECUTING)
        for _ in range(50):  # the loop turns the writer would need to commit it at once
            await asyncio.sleep(0)
        assert writer.acknowledged_seq == 2  # the second batch waits for its interval
        assert len(told) == 1
        await writer.close()
        assert writer.acknowledged_seq == 3
    finally:
        await store.close()
