"""What the operator is told of a run whose worker is gone and that no worker has taken up
yet: its lease nobody renews, and what happens to its write in flight."""

from __future__ import annotations

from pathlib import Path


async def test_resolve_on_a_run_whose_worker_is_gone_says_what_will_happen(tmp_path: Path) -> None:
    """Its write in flight as its worker was lost: the lease nobody renews is said, and that
    the worker taking the run up records the outcome unknown, when `resolve` takes a word."""
    from worker_helpers import left_by_a_lost_worker, options, uninterrupted

    from loopdeck.core.events import ApprovalDecided
    from loopdeck.store import deciding
    from loopdeck.store.opening import open_store

    root = tmp_path / "shared"
    whole = await uninterrupted(tmp_path / "first", "r1")
    cut = next(i for i, e in enumerate(whole) if isinstance(e, ApprovalDecided) and e.approved)
    store = await open_store(tmp_path / "s.db")
    try:
        await left_by_a_lost_worker(store, root, "r1", whole[: cut + 1], options(root, run_id="r1"))
        call_id = whole[cut].call_id
        said = await deciding.resolve(store, "r1", call_id, applied=True, by="cli:ops")
        assert said is not None and "its lease by host-a expired" in said, said
        assert "records it outcome_unknown" in said
    finally:
        await store.close()


async def test_runs_says_a_run_whose_lease_nobody_renews_is_not_running(tmp_path: Path) -> None:
    """`loopdeck runs`: its state `lease expired` (its log's state beside it), its note why."""
    from worker_helpers import left_by_a_lost_worker, options, uninterrupted

    from loopdeck.core.events import ApprovalDecided
    from loopdeck.operator import records
    from loopdeck.store.opening import open_store

    root = tmp_path / "shared"
    whole = await uninterrupted(tmp_path / "first", "r1")
    cut = next(i for i, e in enumerate(whole) if isinstance(e, ApprovalDecided) and e.approved)
    store = await open_store(tmp_path / "s.db")
    try:
        await left_by_a_lost_worker(store, root, "r1", whole[: cut + 1], options(root, run_id="r1"))
        [run] = await records.runs(store)
        assert run.shown_state == "lease expired" and run.live
        assert run.placement is not None and "its lease by host-a expired" in run.placement.note
    finally:
        await store.close()
