"""A console's follower reads again at once when the store changed during its last read
(issue 42's bench: a NOTIFY landing mid-read used to wait for the next change or the poll)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from loopdeck.operator import following
from loopdeck.operator.fleet import Fleet
from loopdeck.store import feed, queries
from loopdeck.store.base import Store
from loopdeck.store.opening import open_store

POLL_S = 600.0  # never reached here: only a change wakes the follower


class Notifying:
    """A store that announces changes as PostgreSQL's listener does: each change wakes the
    waits begun before it."""

    def __init__(self) -> None:
        self._changed = asyncio.Event()

    def announce(self) -> None:
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    async def wait_for_change(self, timeout_s: float) -> None:
        await self._changed.wait()


class Reader:
    def __init__(self, store: Notifying, stop: asyncio.Event) -> None:
        self.store, self.stop = store, stop
        self.reads = 0
        self.read_again = asyncio.Event()

    async def refresh(self, store: Any) -> bool:
        self.reads += 1
        if self.reads == 1:
            await asyncio.sleep(0)  # the read's query in flight
            self.store.announce()  # a commit lands while it is
        else:
            self.read_again.set()
            self.stop.set()
        return True


async def test_a_change_during_a_read_wakes_the_next_read() -> None:
    store, stop = Notifying(), asyncio.Event()
    reader = Reader(store, stop)
    polling = asyncio.create_task(
        following.poll(reader, store, stop, lambda: None, POLL_S)  # type: ignore[arg-type]
    )
    try:
        # far under POLL_S: woken by the change, not by the poll
        await asyncio.wait_for(reader.read_again.wait(), 60)
    finally:
        stop.set()
        await polling
    assert reader.reads == 2


async def a_fleet_with_a_live_run(tmp_path: Path) -> tuple[Store, Fleet]:
    store = await open_store(tmp_path / "s.db")
    await store.execute(
        "INSERT INTO runs (run_id, env, script, model, state, started_at, pid, host)"
        " VALUES ('r1', 'e', 's', 'm', 'executing', '2026-01-01T00:00:00+00:00', 1, 'elsewhere')"
    )
    return store, Fleet()


async def test_the_look_for_dead_runners_goes_beside_the_read_of_what_changed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once a second the fleet looks for runs whose runner died: a commit landing then is
    shown after one round trip (the read of what changed), not after that look's too."""
    store, fleet = await a_fleet_with_a_live_run(tmp_path)
    read_begun = asyncio.Event()
    changes = feed.changes

    async def read(*args: Any) -> feed.Changes:
        read_begun.set()
        return await changes(*args)

    looked: list[bool] = []

    async def look(store: Store) -> list[str]:
        looked.append(read_begun.is_set())
        return []

    monkeypatch.setattr(feed, "changes", read)
    monkeypatch.setattr(queries, "mark_crashed_runners", look)
    try:
        assert await fleet.refresh(store)
        assert looked == [True]  # the read of what changed was under way already
        assert fleet.rows["r1"].live
    finally:
        await store.close()


async def test_what_the_look_for_dead_runners_marks_is_shown_by_the_same_refresh(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, fleet = await a_fleet_with_a_live_run(tmp_path)

    async def look(store: Store) -> list[str]:
        await asyncio.sleep(0)  # the read of what changed goes first
        assert await queries.mark_crashed(store, "r1", "runner pid 1 on elsewhere is gone")
        return ["r1"]

    monkeypatch.setattr(queries, "mark_crashed_runners", look)
    try:
        assert await fleet.refresh(store)
        assert fleet.rows["r1"].stop_reason == "crashed" and not fleet.rows["r1"].live
    finally:
        await store.close()
