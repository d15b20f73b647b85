"""An asking a policy's rule decides is written decided, as a grant's is: no operator can take
it in the moment before the run records the rule's decision (the decision was accepted, then
overwritten by the rule's and reported to the operator as taken)."""

from __future__ import annotations

from typing import Any

import pytest


@pytest.mark.parametrize("effect", ["allow", "deny"])
async def test_an_asking_a_rule_decided_is_never_the_operators_to_decide(
    db: Any, effect: str
) -> None:
    from test_decision_refusals import Recorded

    from loopdeck.core.approvals import ApprovalDecision
    from loopdeck.core.decided_by import DecidedBy
    from loopdeck.core.decision_events import ApprovalDecided, PolicyDecided
    from loopdeck.core.states import RunState
    from loopdeck.store import deciding, queries
    from loopdeck.store.opening import open_store
    from loopdeck.store.writer import EventWriter

    rule = DecidedBy(who="rule", rule_id="r", level="run", policy_sha256="0" * 64)
    run = Recorded("r1").started(RunState.AWAITING_APPROVAL)
    run.add(PolicyDecided, call_id="c1", effect=effect, decided_by=rule, would=effect)
    run.write("c1")
    store = await open_store(db)
    try:
        writer = EventWriter(store, approve_mode="wait")
        for e in run.events:
            writer(e)
        await writer.flush()
        ops = ApprovalDecision(call_id="c1", approved=effect == "deny", reason="mine", by="ops")
        assert not await deciding.decide(store, "r1", ops)
        run.add(
            ApprovalDecided,
            call_id="c1",
            approved=effect == "allow",
            reason="rule r",
            by=rule.words(),
        )
        writer(run.events[-1])
        await writer.flush()
        row = await queries.approval_state(store, "r1", "c1")
        assert row is not None
        state = "approved" if effect == "allow" else "rejected"
        assert (row["state"], row["decided_by"], row["reason"]) == (state, rule.words(), "rule r")
    finally:
        await store.close()
