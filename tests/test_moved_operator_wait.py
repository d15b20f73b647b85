"""The operator's wait of a run that was rebuilt while it waited on its operator (parked, or
its worker lost): its log ends with the wait's start, not its end. The rebuilt run counts the
wait from that start up to the decision (the store's time of it, when it came before the run
was taken up), not from when it was taken up; the agent's clock is not charged the gap."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from worker_helpers import lease_state, left_by_a_lost_worker, options, stored, uninterrupted
from worker_helpers import with_a_worker as worker_until

from loopdeck.caps import Cap
from loopdeck.core.approvals import ApprovalDecision
from loopdeck.core.events import ApprovalRequested, BudgetUpdated
from loopdeck.store import deciding, queries
from loopdeck.store.base import Location, Store
from loopdeck.store.opening import open_store

BEFORE_S = 300.0  # how long before the test the cut wait began


async def _cut_while_waiting(tmp_path: Path) -> tuple[list[Any], datetime]:
    """shared_orders/solve up to its first write's wait for approval (its held budget event),
    that wait begun `BEFORE_S` ago."""
    whole = await uninterrupted(tmp_path / "first", "r1")
    asked = next(i for i, e in enumerate(whole) if isinstance(e, ApprovalRequested))
    held = next(
        i for i, e in enumerate(whole)
        if i > asked and isinstance(e, BudgetUpdated) and e.held == "approval"
    )  # fmt: skip
    began = datetime.now(UTC) - timedelta(seconds=BEFORE_S)
    log = whole[: held + 1]
    log[-1] = log[-1].model_copy(update={"at": began})
    return log, began


async def _decide_the_rest(store: Store) -> bool:
    for item in await queries.pending_approvals(store, "r1"):
        yes = ApprovalDecision(call_id=item["call_id"], approved=True, by="ops")
        await deciding.decide(store, "r1", yes)
    return await lease_state(store, "r1") == "ended"


def _clock(log: list[Any]) -> tuple[float, float]:
    """The run's last (operator's wait, agent's time)."""
    last = [e for e in log if isinstance(e, BudgetUpdated)][-1]
    return last.operator_s, float(last.usage[Cap.DEADLINE][0])


async def test_a_wait_decided_while_no_worker_ran_the_run_counts_up_to_the_decision(
    db: Location, tmp_path: Path
) -> None:
    log, began = await _cut_while_waiting(tmp_path)
    store = await open_store(db)
    try:
        root = tmp_path / "shared"
        await left_by_a_lost_worker(
            store, root, "r1", log, options(root, "solve", "wait", run_id="r1")
        )
        call = next(e.call_id for e in log if isinstance(e, ApprovalRequested))
        assert await deciding.decide(store, "r1", ApprovalDecision(call_id=call, approved=True))
        decided = began + timedelta(seconds=40)  # the operator took 40 s to decide
        await store.execute(
            "UPDATE approvals SET decided_at = ? WHERE run_id = ? AND call_id = ?",
            (decided.isoformat(), "r1", call),
        )
        await worker_until(db, lambda: _decide_the_rest(store))
        operator_s, agent_s = _clock(await stored(store, "r1"))
        # 40 s, and what the later writes waited (decided as soon as seen): not the time
        # from the decision until a worker took the run up again
        assert 40.0 <= operator_s < BEFORE_S - 60, operator_s
        assert agent_s < BEFORE_S - 60, agent_s
    finally:
        await store.close()


async def test_a_wait_still_going_on_when_the_run_is_moved_counts_from_its_start(
    db: Location, tmp_path: Path
) -> None:
    log, _ = await _cut_while_waiting(tmp_path)
    store = await open_store(db)
    try:
        root = tmp_path / "shared"
        await left_by_a_lost_worker(
            store, root, "r1", log, options(root, "solve", "wait", run_id="r1")
        )
        asked = next(e for e in log if isinstance(e, ApprovalRequested))

        async def decided_once_asked_again() -> bool:  # the moved run's own asking
            row = await queries.approval_state(store, "r1", asked.call_id)
            assert row is not None
            again = datetime.fromisoformat(str(row["requested_at"])) != asked.requested_at
            return again and await _decide_the_rest(store)

        await worker_until(db, decided_once_asked_again)
        operator_s, agent_s = _clock(await stored(store, "r1"))
        assert operator_s >= BEFORE_S, operator_s  # up to the move, and on to the decision
        assert agent_s < BEFORE_S - 60, agent_s
    finally:
        await store.close()
