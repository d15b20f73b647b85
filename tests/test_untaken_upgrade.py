"""Decisions the store took, across the v8 upgrade and older (v7) processes: a decision
taken before the upgrade that its run has not read yet stays through the run's next asking
(the migration marks it from the run's log; one the run took is still replaced), and a
pending row a v7 runner asked again with a v8 decider's mark still on it is replaced by the
next asking, not kept for good."""

from __future__ import annotations

from typing import Any


async def test_a_decision_from_before_the_upgrade_the_run_has_not_read_stays(db: Any) -> None:
    from test_decision_refusals import Recorded

    from loopdeck.core.decision_events import ApprovalDecided, ApprovalInvalidated
    from loopdeck.core.states import RunState
    from loopdeck.store import queries
    from loopdeck.store.opening import open_store
    from loopdeck.store.writer import EventWriter

    store = await open_store(db)
    run = Recorded("r1").started(RunState.AWAITING_APPROVAL).write("c1").write("c2")
    run.add(ApprovalDecided, call_id="c2", approved=True, reason="", by="ops")  # c2's, taken
    try:
        writer = EventWriter(store, approve_mode="wait")
        for e in run.events:
            writer(e)
        await writer.flush()
        await store.execute("ALTER TABLE approvals DROP COLUMN untaken")
        await store.execute("UPDATE meta SET value = '7' WHERE key = 'schema_version'")
        # A v7 CLI decides c1 (its UPDATE names no `untaken`); the run has not read it.
        await store.execute(
            "UPDATE approvals SET state = 'approved', decided_by = 'ops' WHERE run_id = 'r1'"
            " AND call_id = 'c1' AND state = 'pending'"
        )
    finally:
        await store.close()
    store = await open_store(db)  # v8 now
    try:
        writer = EventWriter(store, approve_mode="wait")
        writer.resume_from("awaiting_approval", {"c1", "c2"})
        # The run missed c1's decision in its last look, and asks both again.
        for call_id in ("c1", "c2"):
            run.add(ApprovalInvalidated, call_id=call_id, problem="expired", unanswered=True)
            again = Recorded("r1").write(call_id).events[0]
            run.events.append(again.model_copy(update={"seq": len(run.events) + 1}))
            writer(run.events[-2])
            writer(run.events[-1])
        await writer.flush()
        kept = await queries.approval_state(store, "r1", "c1")
        replaced = await queries.approval_state(store, "r1", "c2")
        assert kept is not None and (kept["state"], kept["decided_by"]) == ("approved", "ops")
        assert replaced is not None and replaced["state"] == "pending"
    finally:
        await store.close()


async def test_a_v7_runners_asking_again_with_a_deciders_mark_on_it_is_replaced(db: Any) -> None:
    from test_decision_refusals import Recorded

    from loopdeck.store import queries
    from loopdeck.store.opening import open_store
    from loopdeck.store.writer import EventWriter

    store = await open_store(db)
    try:
        # As a v7 runner leaves it: a v8 CLI decided (untaken = 1), the runner took it
        # (its approval_decided touches pending rows only) and asked again: pending, marked.
        await store.execute(
            "INSERT INTO approvals (run_id, call_id, tool, args, requested_at, expires_at,"
            " state, untaken) VALUES ('r1', 'c1', 'write_file', '{}', 'T1', 'T1', 'pending', 1)"
        )
        asked = Recorded("r1").write("c1").events[0]
        writer = EventWriter(store, approve_mode="wait")
        writer.resume_from("awaiting_approval", {"c1"})
        writer(asked.model_copy(update={"seq": 3}))
        await writer.flush()
        row = await queries.approval_state(store, "r1", "c1")
        assert row is not None and row["state"] == "pending" and not row["untaken"]
        assert row["requested_at"] != "T1"
    finally:
        await store.close()
