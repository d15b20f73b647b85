"""What the operator is told of a run whose worker is gone and that no worker has taken up
yet: its lease nobody renews, and what happens to its write in flight."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from worker_helpers import left_by_a_lost_worker, options, uninterrupted

from loopdeck.core.events import ApprovalDecided
from loopdeck.operator import records
from loopdeck.store import deciding
from loopdeck.store.base import Store
from loopdeck.store.opening import open_store


@pytest.fixture
async def lost(tmp_path: Path) -> AsyncIterator[tuple[Store, str]]:
    """A run left by a lost worker (host-a) as its approved write ran: its store and the
    write's call id."""
    root = tmp_path / "shared"
    whole = await uninterrupted(tmp_path / "first", "r1")
    cut = next(i for i, e in enumerate(whole) if isinstance(e, ApprovalDecided) and e.approved)
    store = await open_store(tmp_path / "s.db")
    try:
        await left_by_a_lost_worker(store, root, "r1", whole[: cut + 1], options(root, run_id="r1"))
        yield store, whole[cut].call_id
    finally:
        await store.close()


async def test_resolve_on_a_run_whose_worker_is_gone_says_what_will_happen(
    lost: tuple[Store, str],
) -> None:
    """The lease nobody renews is said, and that the worker taking the run up records the
    outcome unknown, when `resolve` takes a word."""
    store, call_id = lost
    said = await deciding.resolve(store, "r1", call_id, applied=True, by="cli:ops")
    assert said is not None and "its lease by host-a expired" in said, said
    assert "records it outcome_unknown" in said


async def test_runs_says_a_run_whose_lease_nobody_renews_is_not_running(
    lost: tuple[Store, str],
) -> None:
    """`loopdeck runs`: its state `lease expired` (its log's state beside it), its note why."""
    [run] = await records.runs(lost[0])
    assert run.shown_state == "lease expired" and run.live
    assert run.placement is not None and "its lease by host-a expired" in run.placement.note
