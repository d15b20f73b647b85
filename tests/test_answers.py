"""`awaiting_answer`: the model's question waits for the operator when one is attached (the
console, or `--approve wait` through the store); the answer reaches the model."""

from __future__ import annotations

import asyncio
import time

import pytest
from conftest import SAMPLES, Recorder
from console_helpers import console_app, finished, run_screen, wait_until
from store_helpers import last_json, start_runner, wait_for_pending
from textual.widgets import Input

from loopdeck.core.approvals import Answer, AutoApprover
from loopdeck.core.events import CallStatus, EventBus
from loopdeck.core.states import StopReason
from loopdeck.operator.launch import RunOptions, prepare_run
from loopdeck.tui.dialogs import ApprovalDialog
from loopdeck.tui.question_dialog import QuestionDialog

ENV = SAMPLES / "order_support"


async def _run(options: RunOptions, answerer, **config) -> tuple:
    """Run with an operator (`answerer`) and auto-approved writes; (outcome, recorder)."""
    bus, recorder = EventBus(), Recorder()
    bus.subscribe(recorder)
    prepared = prepare_run(options, approver=AutoApprover(), bus=bus, answerer=answerer)
    runtime = prepared.runtime
    if config:
        runtime.config = runtime.config.model_copy(update=config)
    try:
        outcome = await runtime.run()
    finally:
        prepared.cleanup()
    return outcome, recorder


async def _answer(pilot, app, text: str) -> None:
    """Type into the question dialog once its box has the focus: before that, a letter would
    reach the console's own keys (`s` stops the run, `p` pauses it)."""
    await wait_until(
        pilot,
        lambda: isinstance(app.screen, QuestionDialog) and isinstance(app.screen.focused, Input),
    )
    await pilot.press(*text, "enter")


def _question(app) -> str:
    """The open question dialog's text, once it is on screen ("" before)."""
    if not isinstance(app.screen, QuestionDialog):
        return ""
    found = app.screen.query("#answer-question")
    return str(found.first().render()) if found else ""


async def test_the_answer_reaches_the_model_and_the_run_goes_on() -> None:
    asked = []

    class Operator:
        async def answer(self, run_id, question_id, question):
            asked.append((question_id, question))
            return Answer(text="ORD-1042", by="test")

    options = RunOptions(env=str(ENV), script="ask-then-act", approve="auto")
    outcome, recorder = await _run(options, Operator())
    assert outcome.stop_reason is StopReason.GOAL_MET
    assert asked == [("q1", "Which order should I change: ORD-1042 or ORD-2001?")]
    states = [e.target.value for e in recorder.kinds("state_changed")]
    assert states[states.index("awaiting_answer") + 1] == "deciding"
    [answered] = recorder.kinds("question_answered")
    assert answered.answer == "ORD-1042" and answered.by == "test"
    budget = [e.held for e in recorder.kinds("budget_updated")]
    assert "answer" in budget  # the wait was the operator's time


async def test_the_script_acts_on_the_order_the_operator_named() -> None:
    """`{answer}` in a script is what the operator said: answered ORD-2001, the write is for
    ORD-2001 (and the goal, ORD-1042's address, is not met), never the script's own pick."""

    class Operator:
        async def answer(self, run_id, question_id, question):
            return Answer(text="ORD-2001, the other one", by="test")

    options = RunOptions(env=str(ENV), script="ask-then-act", approve="auto")
    outcome, recorder = await _run(options, Operator())
    [proposed] = [e for e in recorder.kinds("call_proposed") if e.tool == "update_delivery_address"]
    assert proposed.args["order_id"] == "ORD-2001"
    assert outcome.stop_reason is not StopReason.GOAL_MET


async def test_without_an_operator_ask_user_still_stops_the_run() -> None:
    options = RunOptions(env=str(ENV), script="ask-then-act", approve="auto")
    prepared = prepare_run(options)
    try:
        outcome = await prepared.runtime.run()
    finally:
        prepared.cleanup()
    assert outcome.stop_reason is StopReason.ASK_USER


async def test_the_console_asks_the_operator_and_sends_the_answer() -> None:
    app = console_app(ENV, "ask-then-act", answers=True)
    async with app.run_test(size=(160, 48)) as pilot:
        await wait_until(pilot, lambda: "ORD-1042 or ORD-2001" in _question(app))
        screen = run_screen(app)
        assert screen.view.state.value == "awaiting_answer"
        await _answer(pilot, app, "ORD-1042")
        await wait_until(pilot, lambda: isinstance(app.screen, ApprovalDialog))
        await pilot.press("a")
        await wait_until(pilot, lambda: finished(app))
        assert screen.outcome.stop_reason is StopReason.GOAL_MET
        assert any("answered · q1 · by console" in e.title for e in screen.transcript.entries)


@pytest.mark.slow
def test_loopdeck_answer_releases_a_waiting_headless_run(tmp_path, cli) -> None:
    db = tmp_path / "s.db"
    runner = start_runner(ENV, "ask-then-act", db, "--approve", "wait")
    try:
        run_id = runner.stderr.readline().split()[1]
        code, _, err = cli("answer", run_id, "ORD-1042", "--db", str(db))
        while code != 0:  # the run or its question is not recorded yet: again once it is
            assert "no question waiting" in err or f"no run {run_id!r}" in err
            time.sleep(0.05)
            code, _, err = cli("answer", run_id, "ORD-1042", "--db", str(db))
        pending = asyncio.run(wait_for_pending(db))
        assert cli("approve", run_id, pending["call_id"], "--db", str(db))[0] == 0
        out, _ = runner.communicate(timeout=60)
        assert last_json(out)["stop_reason"] == "goal_met"
        code, _, err = cli("answer", run_id, "again", "--db", str(db))
        assert code == 1 and "already ended (goal_met)" in err
    finally:
        runner.kill()
        runner.wait()


async def _run_with_pause(answers: list[str], **overrides):
    asked = []

    class Operator:
        async def answer(self, run_id, question_id, question):
            asked.append(question)
            return Answer(text=answers.pop(0), by="test")

    options = RunOptions(
        env=str(ENV), script="solve", approve="auto", pause_at=0.5,
        budget_overrides={"max_turns": 6, **overrides},
    )  # fmt: skip
    outcome, recorder = await _run(options, Operator())
    return outcome, recorder, asked


async def test_a_budget_past_pause_at_asks_and_a_raised_cap_lets_the_run_finish() -> None:
    outcome, recorder, asked = await _run_with_pause(["raise 20"])
    assert outcome.stop_reason is StopReason.GOAL_MET
    assert len(asked) == 1 and asked[0].startswith("The turns budget is at 50% of its cap")
    [topic] = [e.topic for e in recorder.kinds("question_asked")]
    assert topic == "budget"
    assert recorder.kinds("budget_updated")[-1].usage["turns"][1] == 20


async def test_stop_at_the_budget_pause_ends_the_run_cancelled() -> None:
    outcome, _, _ = await _run_with_pause(["huh", "stop"])
    assert outcome.stop_reason is StopReason.CANCELLED
    assert "when the turns budget paused the run" in outcome.detail


async def test_without_an_operator_pause_at_changes_nothing() -> None:
    options = RunOptions(
        env=str(ENV),
        script="solve",
        approve="auto",
        pause_at=0.5,
        budget_overrides={"max_turns": 6},
    )
    prepared = prepare_run(options)
    try:
        outcome = await prepared.runtime.run()
    finally:
        prepared.cleanup()
    assert outcome.stop_reason is StopReason.GOAL_MET


async def _loop_run(answers: list[str | None], loop_answer_s: float = 60.0, script: str = "loop"):
    """service_outage `loop`: restart_service again and again from the same state."""
    asked: list[str] = []

    class Operator:
        async def answer(self, run_id, question_id, question):
            asked.append(question)
            text = answers.pop(0) if answers else "stop"
            if text is None:
                await asyncio.Event().wait()  # never answers
            return Answer(text=text, by="test")

    options = RunOptions(env=str(SAMPLES / "service_outage"), script=script, approve="auto")
    outcome, recorder = await _run(options, Operator(), loop_answer_s=loop_answer_s)
    return outcome, recorder, asked


async def test_a_loop_put_to_the_operator_and_stopped() -> None:
    outcome, recorder, asked = await _loop_run(["stop"])
    assert outcome.stop_reason is StopReason.NO_PROGRESS
    assert "stopped by test" in outcome.detail
    assert "c2 restart_service() repeats a call from the same state" in asked[0]
    assert "the same as c1" in asked[0]
    assert [e.topic for e in recorder.kinds("question_asked")] == ["loop"]


async def test_a_loop_allowed_once_runs_the_call() -> None:
    # wrong-guess: round 2 repeats get_status (a read) from the same state
    outcome, _, asked = await _loop_run(["allow", "stop"], script="wrong-guess")
    statuses = {c.call_id: c.status for c in outcome.calls}
    assert statuses["c5"] is CallStatus.EXECUTED  # allowed once by the operator
    assert outcome.stop_reason is StopReason.NO_PROGRESS and len(asked) == 2


async def test_allow_is_not_offered_for_a_write_that_already_ran() -> None:
    """Allowing it could only end refused as a duplicate: the question leaves `allow` out, an
    `allow` typed anyway is said so and asked again, and the write never runs twice."""
    outcome, recorder, asked = await _loop_run(["allow", "stop"])
    statuses = [(c.call_id, c.status) for c in outcome.calls]
    assert statuses[:2] == [("c1", CallStatus.EXECUTED), ("c2", CallStatus.SKIPPED)]
    first, again = recorder.kinds("question_asked")
    assert first.choices == ["stop", "nudge"] and "`allow`" not in first.question
    assert ("allow", "not offered: this write already ran, it would be refused") in first.evidence
    assert again.question.startswith("`allow` is not offered: this write already ran")
    assert outcome.stop_reason is StopReason.NO_PROGRESS and len(asked) == 2


async def test_a_loop_answer_not_understood_is_said_and_asked_again() -> None:
    outcome, recorder, asked = await _loop_run(["maybe", "stop"])
    assert len(asked) == 2 and asked[1].startswith("Not understood: 'maybe'.")
    assert outcome.stop_reason is StopReason.NO_PROGRESS and "stopped by test" in outcome.detail
    first = recorder.kinds("question_asked")[0]
    assert first.title == "The guard stopped a repeat" and first.acts_at is not None
    evidence = dict(first.evidence)
    assert evidence["repeated call"].startswith("c2 restart_service(")
    assert evidence["earlier identical call"] == "c1"
    assert evidence["its result"].startswith("executed")
    assert {"fingerprint", "state"} <= set(evidence)


async def test_a_nudge_reaches_the_model_and_the_executor_goes_on() -> None:
    outcome, recorder, asked = await _loop_run(["nudge check the status first", "stop"])
    assert len(asked) == 2  # the round did not end at the first repeat
    [blocked, *_] = [c for c in outcome.calls if c.status is CallStatus.BLOCKED_REPEAT]
    assert blocked.call_id == "c2"
    model = recorder.kinds("model_called")
    assert len(model) >= 3  # planner, the first turn, the turn after the nudge


async def test_no_answer_in_time_leaves_the_guard_to_act_alone() -> None:
    outcome, recorder, _ = await _loop_run([None], loop_answer_s=0.05)
    assert outcome.stop_reason in (StopReason.NO_PROGRESS, StopReason.STALLED)
    [answered] = recorder.kinds("question_answered")
    assert answered.by == "timeout"


async def test_the_console_pauses_at_a_budget_and_continues() -> None:
    app = console_app(ENV, "solve", answers=True, max_turns=6)
    runtime = app.prepared.runtime
    runtime.config = runtime.config.model_copy(update={"pause_at": 0.5})
    async with app.run_test(size=(160, 48)) as pilot:
        await wait_until(pilot, lambda: "turns budget is at 50%" in _question(app))
        assert run_screen(app).view.held == "answer"  # the operator's time, not the agent's
        dialog = app.screen
        assert isinstance(dialog, QuestionDialog) and dialog.choices == (
            "continue",
            "raise",
            "stop",
        )
        assert "Budget: 50% of turns used" in str(dialog.query_one("#answer-title").render())
        await pilot.press("c")
        await wait_until(pilot, lambda: isinstance(app.screen, ApprovalDialog))
        await pilot.press("a")
        await wait_until(pilot, lambda: finished(app))
        assert run_screen(app).outcome.stop_reason is StopReason.GOAL_MET


async def test_the_console_puts_a_loop_to_the_operator_nudge_then_stop() -> None:
    app = console_app(
        SAMPLES / "service_outage", "wrong-guess", approver=AutoApprover(), answers=True
    )
    async with app.run_test(size=(160, 48)) as pilot:
        await wait_until(pilot, lambda: "repeats a call" in _question(app))
        text = _question(app)
        assert "c5 get_status() repeats a call from the same state" in text
        assert "fingerprint" in text and "the same as c4" in text
        dialog = app.screen
        assert isinstance(dialog, QuestionDialog)
        assert "The guard stopped a repeat" in str(dialog.query_one("#answer-title").render())
        assert "the guard acts alone in" in str(dialog.query_one("#answer-countdown").render())
        assert not isinstance(dialog.focused, Input)  # single keys first: `s` answers stop
        await pilot.press("n")
        await _answer(pilot, app, "read last_error")
        await wait_until(
            pilot,
            lambda: isinstance(app.screen, QuestionDialog) and app.screen.question_id == "q2",
        )
        # Offered as the guard asked it (never as the agent's text box, which types the `s`).
        guard_asks = app.screen
        assert isinstance(guard_asks, QuestionDialog) and guard_asks.answers_stop
        await pilot.press("s")  # over the guard's question the stop key is its answer
        await wait_until(pilot, lambda: finished(app))
        outcome = run_screen(app).outcome
        assert outcome.stop_reason is StopReason.NO_PROGRESS, outcome.detail
        assert "stopped by console" in outcome.detail
