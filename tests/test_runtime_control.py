"""Stop after current tools, kill now, pause/resume, the deadline, and the event order."""

import asyncio

from conftest import HARNESS, SAMPLES, run_env

from loopdeck.core.approvals import ApprovalDecision
from loopdeck.core.events import CallStatus
from loopdeck.core.states import RunState, StopReason


async def test_stop_after_current_tools_lets_the_tool_finish() -> None:
    def on_event(prepared, event):
        if event.kind == "call_proposed" and event.tool == "slow":
            prepared.runtime.cancel(after_current_tools=True, by="test")

    outcome, rec = await run_env(HARNESS, "slow", on_event=on_event)
    assert outcome.stop_reason is StopReason.CANCELLED
    assert outcome.state is RunState.STOPPED
    assert [c.status for c in outcome.calls] == [CallStatus.EXECUTED]
    # planner + the executor turn that proposed slow; no model call after the stop
    assert outcome.model_calls == 2
    assert rec.kinds("operator_command")[0].by == "test"


async def test_kill_cancels_the_inflight_tool() -> None:
    def on_event(prepared, event):
        if event.kind == "call_proposed" and event.tool == "slow":
            asyncio.get_running_loop().call_later(0.05, prepared.runtime.kill, "test")

    envs = []
    outcome, _ = await run_env(
        HARNESS, "slow", on_event=lambda p, e: (envs.append(p.runtime.env), on_event(p, e))
    )
    assert outcome.stop_reason is StopReason.KILLED
    assert [c.status for c in outcome.calls] == [CallStatus.INTERRUPTED]
    assert envs[0].slow_finished == 0  # the tool was cancelled, not run to its end


async def test_kill_withdraws_a_pending_approval() -> None:
    class NeverAnswers:
        async def ask(self, request):
            await asyncio.Event().wait()

    def on_event(prepared, event):
        if event.kind == "approval_requested":
            asyncio.get_running_loop().call_soon(prepared.runtime.kill, "test")

    outcome, rec = await run_env(HARNESS, "note", approver=NeverAnswers(), on_event=on_event)
    assert outcome.stop_reason is StopReason.KILLED
    assert [e.call_id for e in rec.kinds("approval_withdrawn")] == ["c1"]
    assert outcome.calls[0].status is CallStatus.WITHDRAWN


async def test_stop_while_awaiting_approval_is_cancelled_not_executed() -> None:
    class NeverAnswers:
        async def ask(self, request):
            await asyncio.Event().wait()

    def on_event(prepared, event):
        if event.kind == "approval_requested":
            asyncio.get_running_loop().call_soon(prepared.runtime.cancel)

    outcome, _ = await run_env(HARNESS, "note", approver=NeverAnswers(), on_event=on_event)
    assert outcome.stop_reason is StopReason.CANCELLED
    assert outcome.calls[0].status is CallStatus.WITHDRAWN


async def test_pause_holds_model_calls_until_resume() -> None:
    seen_while_paused = []

    def on_event(prepared, event):
        rt = prepared.runtime
        if event.kind == "plan_written":
            rt.pause("test")
        if event.kind == "budget_updated" and event.held == "paused":
            # the pause holds: the agent's clock is stopped; resume from the loop
            asyncio.get_running_loop().call_soon(rt.resume, "test")
        if event.kind == "model_called" and rt.control.paused:
            seen_while_paused.append(event)

    outcome, rec = await run_env(HARNESS, "note", on_event=on_event)
    assert outcome.stop_reason is StopReason.GOAL_MET
    assert seen_while_paused == []
    commands = rec.kinds("operator_command")
    assert [e.command for e in commands] == ["pause", "resume"]
    # the next model call came only after the resume
    resumed_seq = commands[1].seq
    assert all(e.seq > resumed_seq for e in rec.kinds("model_called")[1:])
    assert "paused" in [e.held for e in rec.kinds("budget_updated")]


async def test_time_waiting_on_the_operator_is_not_charged_to_the_deadline() -> None:
    """An approval that waits longer than the whole deadline: the agent's clock stood still."""
    runs = []

    class AnswersAfterTheDeadline:
        async def ask(self, request):
            ledger = runs[0].runtime.ledger
            while ledger.operator_s() <= ledger.budget.deadline_s:
                await asyncio.sleep(0.01)  # waits on a condition: the operator's time passing
            return ApprovalDecision(call_id=request.call_id, approved=True, by="test")

    outcome, rec = await run_env(
        HARNESS,
        "note",
        approver=AnswersAfterTheDeadline(),
        deadline=0.3,
        on_event=lambda p, e: runs.append(p) if not runs else None,
    )
    assert outcome.stop_reason is StopReason.GOAL_MET
    held = [e.held for e in rec.kinds("budget_updated")]
    assert "approval" in held and held[-1] is None
    # the wait was recorded as the operator's, in the outcome and the last budget event
    assert outcome.operator_wait_s == rec.kinds("budget_updated")[-1].operator_s != 0


async def test_event_order_of_service_outage_solve() -> None:
    outcome, rec = await run_env(SAMPLES / "service_outage", "solve")
    assert outcome.stop_reason is StopReason.GOAL_MET
    states = [e.target.value for e in rec.kinds("state_changed")]
    assert states == [
        "planning",
        "deciding",
        "executing", "deciding",  # get_status
        "awaiting_approval", "executing", "deciding",  # set_config
        "awaiting_approval", "executing", "deciding",  # scale_service
        "reviewing",  # its change met the goal: checked at once, before the next model turn
        "complete",
    ]  # fmt: skip
    kinds = [e.kind for e in rec.events]
    assert kinds[0] == "run_started" and kinds[-1] == "run_stopped"
    assert [e.seq for e in rec.events] == list(range(1, len(rec.events) + 1))
    assert rec.kinds("review_verdict")[0].verdict == "pass"


async def test_unsubscribe_stops_delivery() -> None:
    from loopdeck.core.events import EventBus, OperatorCommand

    bus, got = EventBus(), []
    unsubscribe = bus.subscribe(got.append)
    bus.publish(OperatorCommand(run_id="r", command="pause", by="x"))
    unsubscribe()
    bus.publish(OperatorCommand(run_id="r", command="resume", by="x"))
    assert [e.command for e in got] == ["pause"]


async def test_an_env_that_breaks_mid_run_still_gets_a_stop() -> None:
    from conftest import prepare

    prepared, rec = prepare(HARNESS, "note")
    env = prepared.runtime.env
    calls = {"n": 0}
    real_snapshot = env.snapshot

    def flaky_snapshot():
        calls["n"] += 1
        if calls["n"] > 2:
            raise OSError("disk vanished")
        return real_snapshot()

    env.snapshot = flaky_snapshot
    outcome = await prepared.runtime.run()
    prepared.cleanup()
    assert outcome.stop_reason is StopReason.CRASHED
    assert "OSError: disk vanished" in outcome.detail
    assert rec.events[-1].kind == "run_stopped"
