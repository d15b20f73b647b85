"""A fork made past a write of its source whose outcome is unknown (the source's worker lost
while the write ran). Where the fork's env is restored to the state the source saw at the fork
point, that write's outcome in the fork is the restored state's: it is not offered for
`resolve`, and a word on it is refused (recorded "executed", it read as a note the fork's
state does not have). Where the state is not restored, it is still asked about."""

from __future__ import annotations

from pathlib import Path

import pytest
from worker_helpers import lease_state, left_by_a_lost_worker, options, stored, uninterrupted
from worker_helpers import with_a_worker as worker_until

from loopdeck.core.events import ApprovalDecided, OutcomeResolved, RunForked, ToolFinished
from loopdeck.operator.fork import fork
from loopdeck.operator.runview import RunView
from loopdeck.store import deciding, outcome_queries
from loopdeck.store.base import Store
from loopdeck.store.opening import open_store


async def _ended(store: Store, run_id: str) -> bool:
    return await lease_state(store, run_id) == "ended"


async def _source_lost_during_c3(store: Store, db: Path, tmp_path: Path) -> None:
    """Run "src": its worker lost as its first write (c3, a note) ran, never applied; taken
    up by another worker, which records c3's outcome unknown and runs it to its end."""
    whole = await uninterrupted(tmp_path / "first", "src")
    decided = next(
        i for i, e in enumerate(whole) if isinstance(e, ApprovalDecided) and e.call_id == "c3"
    )
    root = tmp_path / "shared"
    await left_by_a_lost_worker(
        store, root, "src", whole[: decided + 1], options(root, run_id="src")
    )
    await worker_until(db, lambda: _ended(store, "src"))
    finished = [e for e in await stored(store, "src") if isinstance(e, ToolFinished)]
    assert [e.status.value for e in finished if e.call_id == "c3"] == ["outcome_unknown"]
    assert await outcome_queries.outcome_unknown(store, "src") == ["c3"]


@pytest.mark.parametrize("restore", [True, False])
async def test_a_fork_restored_past_an_unknown_outcome_does_not_ask_about_it(
    restore: bool, tmp_path: Path
) -> None:
    db = tmp_path / "s.db"
    store = await open_store(db)
    try:
        await _source_lost_during_c3(store, db, tmp_path)
        # not restored: left as seeded, another order's date changed (not the state it saw)
        other = ["data.restore=false", 'data.orders.ORD-2001.eta="2026-12-01"']
        settings = [] if restore else other
        forked = await fork(db, "src", "c4", settings=settings)
        await worker_until(db, lambda: _ended(store, forked))
        log = await stored(store, forked)
        said = next(e for e in log if isinstance(e, RunForked))
        view = RunView()  # what the console offers to resolve
        for event in log:
            view.apply(event)
        assert said.state_restored is restore
        unknown = await outcome_queries.outcome_unknown(store, forked)
        why = await deciding.resolve(store, forked, "c3", applied=True, by="ops")
        if restore:
            assert unknown == [] and list(view.unknown) == []
            assert said.settled == ["c3"]
            assert await outcome_queries.unknown_outcomes(store, forked) == []
            assert why is not None and "restored" in why and "src" in why, why
            assert not any(isinstance(e, OutcomeResolved) for e in await stored(store, forked))
        else:  # its state is not the one the source saw: only the operator knows
            assert unknown == ["c3"] and list(view.unknown) == ["c3"]
            assert said.settled == []
            assert why is None
            assert await outcome_queries.outcome_unknown(store, forked) == []  # resolved
        # the source's own is still asked about, whatever the fork did
        assert await outcome_queries.outcome_unknown(store, "src") == ["c3"]
    finally:
        await store.close()
