"""`StoreLink` reading a long stored history (issue 43): the next batch read while one is
handed out, the approvals read once caught up (not once a batch), the collector held once."""

from __future__ import annotations

import asyncio
import gc
from pathlib import Path
from typing import Any

import pytest

from loopdeck.core.events import BudgetUpdated, EventBus, RunStarted, RunStopped, StateChanged
from loopdeck.core.states import RunState, StopReason
from loopdeck.operator import store_link
from loopdeck.operator.runview import RunView
from loopdeck.operator.store_link import StoreLink
from loopdeck.store import queries
from loopdeck.store.base import Location, StoreUnavailable
from loopdeck.store.opening import open_store
from loopdeck.store.writer import EventWriter
from loopdeck.tuning import collector

BATCH = 7
MOVES = BATCH * 5 + 3  # five full batches, then a partial one with the stop


async def stored_run(db: Location, moves: int = MOVES) -> int:
    """A stopped run of `moves` state changes: its events' count."""
    store = await open_store(db)
    bus, writer = EventBus(), EventWriter(store)
    bus.subscribe(writer)
    writer.start()
    bus.publish(RunStarted(run_id="long", env="e", script=None, model="m", mode="rounds",
                           goal="g", budget={}))  # fmt: skip
    for _ in range(moves):
        bus.publish(StateChanged(run_id="long", source=RunState.PLANNING, target=RunState.PLANNING))
    bus.publish(RunStopped(run_id="long", state=RunState.STOPPED,
                           stop_reason=StopReason.TURN_LIMIT, detail="turns"))  # fmt: skip
    await writer.close()
    await store.close()
    return moves + 2


@pytest.fixture
def small_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(StoreLink, "BATCH", BATCH)


@pytest.mark.usefixtures("small_batches")
async def test_a_read_ahead_that_fails_is_read_again_and_every_event_arrives_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    count = await stored_run(tmp_path / "runs.db")
    reads: list[int] = []
    events_after = queries.events_after

    async def failing_third(store: Any, run_id: str, seq: int, limit: int = 5000) -> list[Any]:
        reads.append(seq)
        if len(reads) == 3:  # a read ahead (the first two batches were full)
            raise StoreUnavailable("the store went away", StoreUnavailable.UNREACHABLE)
        return await events_after(store, run_id, seq, limit)

    monkeypatch.setattr(queries, "events_after", failing_third)
    link, seen = StoreLink(tmp_path / "runs.db", "long"), []
    link.subscribe(seen.append)
    await link.drive()
    assert [e.seq for e in seen] == list(range(1, count + 1))
    assert reads[2] == reads[3] == 2 * BATCH  # the failed read, read again from where it was
    assert not link.store_outage  # recovered


@pytest.mark.slow
@pytest.mark.usefixtures("small_batches")
async def test_on_postgres_every_event_of_a_long_history_arrives_once_in_order(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """PostgreSQL's one connection takes the read ahead and the approvals' read in turn."""
    from conftest import fresh_pg_database

    url = fresh_pg_database(monkeypatch)
    count = await stored_run(url)
    link, seen = StoreLink(url, "long"), []
    link.subscribe(seen.append)
    await link.drive()
    assert [e.seq for e in seen] == list(range(1, count + 1))


@pytest.mark.usefixtures("small_batches")
async def test_the_approvals_are_read_once_caught_up_not_once_a_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    await stored_run(tmp_path / "runs.db")
    monkeypatch.setattr(StoreLink, "PENDING_EVERY_S", 3600.0)
    pending_reads: list[int] = []
    pending_approvals = queries.pending_approvals

    async def counted(store: Any, run_id: str) -> list[Any]:
        pending_reads.append(1)
        return await pending_approvals(store, run_id)

    monkeypatch.setattr(queries, "pending_approvals", counted)
    link = StoreLink(tmp_path / "runs.db", "long")
    await link.drive()
    # The first batch's (none read yet), then the stop's batch (caught up): not six.
    assert len(pending_reads) == 2
    assert link.pending() == []


@pytest.mark.usefixtures("small_batches")
async def test_the_history_read_holds_the_collector_once_without_collecting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A hold inside the link's own (each batch's parse) would be an overlap: with the valve
    for overlaps at 0 s, it would collect the young generations at every batch."""
    await stored_run(tmp_path / "runs.db")
    monkeypatch.setattr(collector, "MAX_HELD_S", 0.0)
    link = StoreLink(tmp_path / "runs.db", "long")
    link.folds = True  # as the run screen says it
    collected: list[bool] = []

    def during_history(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            collected.append(link.reading_history)

    parsed: list[int] = []
    parse_held = store_link.parse_held
    monkeypatch.setattr(
        store_link, "parse_held", lambda rows: parsed.append(len(rows)) or parse_held(rows)
    )
    gc.callbacks.append(during_history)
    try:
        await link.drive()
    finally:
        gc.callbacks.remove(during_history)
    # The full batches parsed under the link's own hold, and the one that caught up too.
    assert parsed == [BATCH] * 5 + [MOVES + 2 - 5 * BATCH]
    assert not any(collected)
    # Held until the console folded what was handed out: a collection then walks the view,
    # not the history parsed and not yet folded.
    assert not gc.isenabled()
    link.folded()
    assert gc.isenabled()


@pytest.mark.usefixtures("small_batches")
async def test_a_history_nobody_folds_gives_the_collector_back_all_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    await stored_run(tmp_path / "runs.db")
    monkeypatch.setattr(StoreLink, "FOLD_WAIT_S", 0.01)
    link = StoreLink(tmp_path / "runs.db", "long")
    link.folds = True
    await link.drive()
    while not gc.isenabled():  # the link's own timer gives it back
        await asyncio.sleep(0.01)
    link.folded()  # late: nothing more happens
    assert gc.isenabled()


@pytest.mark.usefixtures("small_batches")
async def test_a_link_nobody_folds_for_holds_nothing_once_caught_up(tmp_path: Path) -> None:
    await stored_run(tmp_path / "runs.db")
    link = StoreLink(tmp_path / "runs.db", "long")  # `loopdeck attach --headless`, a test
    await link.drive()
    assert gc.isenabled()


def test_the_caps_are_the_last_budget_events_read_when_asked() -> None:
    view = RunView()
    assert view.caps == {} and view.agent_s == 0.0
    for used in (1.0, 2.5):
        view.apply(
            BudgetUpdated(
                run_id="r", usage={"deadline_s": (used, 60.0), "tokens": (10 * used, 100.0)}
            )
        )
    assert view.last_budget is not None
    assert view.caps == view.last_budget.caps()
    assert view.agent_s == 2.5
