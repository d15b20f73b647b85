"""Receipts bound to run, call, arguments, state and time; idempotent writes; rejections."""

import asyncio
from datetime import UTC, datetime, timedelta

import pytest
from conftest import EDGES, HARNESS, SAMPLES, run_env

from loopdeck.core.approvals import ApprovalDecision, ApprovalReceipt, request_for
from loopdeck.core.dispatcher import Dispatcher, ReceiptRefused
from loopdeck.core.events import CallStatus
from loopdeck.core.states import StopReason


def _receipt(args=None, state="s1", ttl=60.0):
    request = request_for(
        run_id="r1",
        call_id="c1",
        tool="write_note",
        args=args or {"text": "done"},
        state_hash=state,
        fingerprint="f",
        plan_step=None,
        ttl_s=ttl,
    )
    return ApprovalReceipt.issue(
        request, ApprovalDecision(call_id=request.call_id, approved=True, by="op")
    )


def test_receipt_covers_exactly_its_call() -> None:
    receipt = _receipt()
    ok = {"run_id": "r1", "call_id": "c1", "args": {"text": "done"}, "state_hash": "s1"}
    assert receipt.problem(**ok) is None
    assert (
        receipt.problem(**{**ok, "args": {"text": "other"}}) == "arguments changed since approval"
    )
    assert (
        receipt.problem(**{**ok, "state_hash": "s2"}) == "environment state changed since approval"
    )
    assert receipt.problem(**{**ok, "call_id": "c2"}) == "receipt belongs to another call"
    later = datetime.now(UTC) + timedelta(seconds=61)
    assert receipt.problem(**ok, now=later) == "approval expired"


async def test_dispatcher_refuses_a_write_with_changed_arguments() -> None:
    from conftest import prepare

    prepared, _ = prepare(HARNESS, "note")
    spec = prepared.runtime.tools["write_note"]
    receipt = _receipt()
    with pytest.raises(ReceiptRefused, match="arguments changed"):
        await Dispatcher().run(
            spec,
            "c1",
            {"text": "something else"},
            receipt=receipt,
            receipt_problem=lambda r: r.problem(
                run_id="r1", call_id="c1", args={"text": "something else"}, state_hash="s1"
            ),
        )
    with pytest.raises(ReceiptRefused, match="no approval receipt"):
        await Dispatcher().run(spec, "c1", {"text": "x"})
    prepared.cleanup()
    assert prepared.runtime.env.notes == []


class ChangesStateWhileDeciding:
    """An operator who takes long enough for the world to move under the request."""

    def __init__(self, env_holder, times):
        self.env_holder = env_holder
        self.times = times
        self.asked = 0

    async def ask(self, request):
        self.asked += 1
        if self.asked <= self.times:
            self.env_holder[0].notes.append(f"drift {self.asked}")
        return ApprovalDecision(call_id=request.call_id, approved=True, by="slow-operator")


async def test_changed_state_means_asked_again() -> None:
    holder = []
    approver = ChangesStateWhileDeciding(holder, times=1)

    def on_event(prepared, event):
        holder[:] = [prepared.runtime.env]

    outcome, rec = await run_env(HARNESS, "note", approver=approver, on_event=on_event)
    assert approver.asked == 2
    assert [e.problem for e in rec.kinds("approval_invalidated")] == [
        "environment state changed since approval"
    ]
    assert outcome.calls[0].status is CallStatus.EXECUTED
    assert outcome.stop_reason is StopReason.GOAL_MET


async def test_state_that_never_holds_still_is_a_policy_block() -> None:
    holder = []
    approver = ChangesStateWhileDeciding(holder, times=99)
    outcome, _rec = await run_env(
        HARNESS,
        "note",
        approver=approver,
        on_event=lambda p, e: holder.__setitem__(slice(None), [p.runtime.env]),
    )
    assert outcome.stop_reason is StopReason.POLICY_BLOCK
    assert approver.asked == 3
    assert "done" not in outcome.calls[0].result.__repr__()


async def test_a_request_nobody_decides_before_it_expires_is_asked_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from loopdeck.core import write_approvals

    # An approver of this process answers late: nothing of the store to look at past expiry.
    monkeypatch.setattr(write_approvals, "LAST_LOOK_S", 0.0)

    class LateThenPrompt:
        asked = 0

        async def ask(self, request):
            self.asked += 1
            if self.asked == 1:
                await asyncio.sleep(0.15)
            return ApprovalDecision(call_id=request.call_id, approved=True, by="op")

    from conftest import prepare

    prepared, rec = prepare(HARNESS, "note", approver=LateThenPrompt())
    prepared.runtime.config = prepared.runtime.config.model_copy(update={"approval_ttl_s": 0.1})
    outcome = await prepared.runtime.run()
    prepared.cleanup()
    [expired] = [e.problem for e in rec.kinds("approval_invalidated")]
    assert expired.startswith("the request expired unanswered at ")
    assert outcome.stop_reason is StopReason.GOAL_MET


async def test_a_write_nobody_decides_in_three_asks_stops_the_run_never_waits_forever() -> None:
    """A request refused once it expired (`loopdeck approve` exits 1) must not leave the run
    waiting on it: each expiry asks again, and the third stops the run `policy_block`."""

    class Silent:
        asked = 0

        async def ask(self, request):
            self.asked += 1
            await asyncio.Event().wait()  # nobody ever decides

    from conftest import prepare

    silent = Silent()
    prepared, rec = prepare(HARNESS, "note", approver=silent)
    prepared.runtime.config = prepared.runtime.config.model_copy(update={"approval_ttl_s": 0.05})
    outcome = await prepared.runtime.run()
    prepared.cleanup()
    assert silent.asked == 3 and len(rec.kinds("approval_requested")) == 3
    assert outcome.stop_reason is StopReason.POLICY_BLOCK
    assert "could not be kept valid after 3 asks" in outcome.detail
    assert outcome.calls[0].status is CallStatus.WITHDRAWN  # never run, never unknown


async def test_rejection_reason_reaches_the_model() -> None:
    class Rejects:
        async def ask(self, request):
            return ApprovalDecision(
                call_id=request.call_id, approved=False, reason="not on a Friday", by="op"
            )

    seen = []
    outcome, _ = await run_env(
        SAMPLES / "order_support",
        "solve",
        approver=Rejects(),
        on_event=lambda p, e: seen.append(p.runtime) if not seen else None,
    )
    update = next(c for c in outcome.calls if c.tool == "update_delivery_address")
    assert update.status is CallStatus.REJECTED
    assert update.result["error"] == {"code": "REJECTED", "message": "not on a Friday"}
    assert outcome.stop_reason is not StopReason.GOAL_MET


async def test_same_idempotency_key_never_runs_twice() -> None:
    outcome, rec = await run_env(EDGES, "double-note")
    updates = [c for c in outcome.calls if c.tool == "write_note"]
    assert [c.status for c in updates] == [CallStatus.EXECUTED, CallStatus.REFUSED_DUPLICATE]
    assert updates[1].result["error"]["code"] == "DUPLICATE_WRITE"
    # the duplicate never reached the operator
    assert len(rec.kinds("approval_requested")) == 1


async def test_approval_request_names_the_plan_step() -> None:
    _, rec = await run_env(SAMPLES / "order_support", "solve")
    request = rec.kinds("approval_requested")[0]
    assert request.plan_step.startswith("3. Update the delivery address")
    assert request.expires_at > request.requested_at
