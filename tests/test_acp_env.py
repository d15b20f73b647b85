"""ACP agents as runs (issue 29): loopdeck's scripted ACP agent on the `calc_acp` sample env,
driven through the runtime's own loop: its plan, calls and usage as events, a permission as a
loopdeck approval, the guard keyed on the working copy, the cost cap mid-turn, an agent that
dies, a stop mid-permission, and no agent process left behind."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import SAMPLES, Recorder
from process_helpers import live_processes

from loopdeck.core.approvals import ApprovalDecision, ApprovalRequest
from loopdeck.core.events import CallStatus, EventBus
from loopdeck.core.states import StopReason
from loopdeck.operator.launch import RunOptions, prepare_run

CALC = SAMPLES / "calc_acp"
AGENT = "loopdeck.acp_env.scripted_agent"


def _agents() -> list[int]:
    """Live scripted agents playing the sample env's scenario (the ones runs here started:
    other tests drive their own copies)."""
    return live_processes(AGENT, str(CALC / "scenario.toml"))


async def _run(
    script: str,
    approve: str = "auto",
    approver: Any = None,
    answerer: Any = None,
    pause_at: float | None = None,
) -> tuple[Any, Recorder]:
    bus, recorder = EventBus(), Recorder()
    bus.subscribe(recorder)
    options = RunOptions(env=str(CALC), script=script, approve=approve, pause_at=pause_at)  # type: ignore[arg-type]
    prepared = prepare_run(options, approver=approver, bus=bus, answerer=answerer)
    try:
        outcome = await prepared.runtime.run()
    finally:
        prepared.cleanup()
    return outcome, recorder


@pytest.mark.slow  # seconds: the agent, the SDK's import, pytest as the goal check
async def test_the_agent_fixes_the_repo_under_loopdecks_approval() -> None:
    outcome, rec = await _run("solve")
    assert outcome.stop_reason is StopReason.GOAL_MET, outcome.detail
    assert outcome.model == "acp scripted_agent"
    [plan] = rec.kinds("plan_written")
    assert plan.steps == ["Read calc.py", "Fix add", "Say what changed"]
    proposed = [(e.tool, e.risk) for e in rec.kinds("call_proposed")]
    assert proposed == [("read: Read calc.py", "read"), ("edit: Fix add in calc.py", "write")]
    [asked] = rec.kinds("approval_requested")
    assert asked.tool == "edit" and asked.args == {"path": "calc.py"}
    assert [e.status for e in rec.kinds("tool_finished")] == [CallStatus.EXECUTED] * 2
    [turn] = rec.kinds("model_called")
    assert turn.role == "agent" and turn.cost_usd == 0.01 and "Fixed add" in turn.content
    assert outcome.cost_usd == 0.01 and outcome.tokens == 1800
    assert _agents() == []


@pytest.mark.slow
async def test_a_rejected_write_is_never_made_and_the_run_stalls() -> None:
    outcome, rec = await _run("reject", approve="deny")
    assert outcome.stop_reason is StopReason.STALLED
    assert [e.approved for e in rec.kinds("approval_decided")] == [False]
    assert [e.status for e in rec.kinds("tool_finished")] == [CallStatus.REJECTED]
    [verdict] = rec.kinds("review_verdict")  # the working copy never changed
    assert verdict.before_hash == verdict.after_hash


@pytest.mark.slow
async def test_the_guard_stops_a_read_repeated_on_an_unchanged_working_copy() -> None:
    outcome, rec = await _run("loop")
    assert outcome.stop_reason is StopReason.NO_PROGRESS, outcome.detail
    assert [e.tool for e in rec.kinds("guard_tripped")] == ["read: Read calc.py"]
    assert _agents() == []


@pytest.mark.slow
async def test_the_cost_cap_stops_a_runaway_mid_turn() -> None:
    outcome, _ = await _run("runaway")
    assert outcome.stop_reason is StopReason.COST_LIMIT, outcome.detail
    assert _agents() == []


@pytest.mark.slow
async def test_an_agent_that_dies_mid_turn_stops_the_run_naming_it() -> None:
    outcome, _ = await _run("dies")
    assert outcome.stop_reason is StopReason.TOOL_FAILURE
    assert "went away mid-turn" in outcome.detail and "exiting with 3" in outcome.detail


@pytest.mark.slow
async def test_an_agent_dead_mid_turn_is_named_so_when_its_exit_is_noticed_first(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The broken connection ends the turn's request before the process's wait returns; the
    exit's watcher, noticing first, still says the agent died mid-turn (CI saw "exited")."""
    from loopdeck.acp_env.loop import AcpLoop

    taken = AcpLoop._next

    async def next_after_the_exit_is_seen(self: AcpLoop, turn: asyncio.Future[Any]) -> Any:
        item = await taken(self, turn)
        if item is None and turn.exception() is not None:  # the connection broke
            assert self.agent.proc is not None
            await self.agent.proc.wait()
            await asyncio.Event().wait()  # the watcher stops the run from here
        return item

    monkeypatch.setattr(AcpLoop, "_next", next_after_the_exit_is_seen)
    outcome, _ = await _run("dies")
    assert outcome.stop_reason is StopReason.TOOL_FAILURE
    assert "went away mid-turn (exit status 3)" in outcome.detail, outcome.detail


@pytest.mark.slow
async def test_a_write_the_agent_makes_after_a_rejection_is_gated_and_refused() -> None:
    outcome, rec = await _run("ignores-rejection", approve="deny")
    assert outcome.stop_reason is StopReason.STALLED
    decided = [(e.call_id, e.approved) for e in rec.kinds("approval_decided")]
    assert decided == [("c1", False), ("c2", False)]  # the edit, then its write asked again
    [verdict] = rec.kinds("review_verdict")  # the write never landed
    assert verdict.before_hash == verdict.after_hash


class StopsWhileAsked:
    """Kills the run while the agent's permission waits on the operator."""

    def __init__(self) -> None:
        self.runtime: Any = None

    async def ask(self, request: ApprovalRequest) -> ApprovalDecision:
        self.runtime.kill(by="test")
        await asyncio.Event().wait()  # the kill ends this wait
        raise AssertionError("not reached")


@pytest.mark.slow
async def test_a_kill_while_a_permission_waits_cancels_the_turn_and_ends_the_agent() -> None:
    operator = StopsWhileAsked()
    bus, rec = EventBus(), Recorder()
    bus.subscribe(rec)
    prepared = prepare_run(RunOptions(env=str(CALC), script="solve"), approver=operator, bus=bus)
    operator.runtime = prepared.runtime
    try:
        outcome = await prepared.runtime.run()
    finally:
        prepared.cleanup()
    assert outcome.stop_reason is StopReason.KILLED
    assert [e.call_id for e in rec.kinds("approval_withdrawn")] == ["c2"]
    assert _agents() == []


@pytest.mark.slow
def test_the_sample_acp_env_from_the_cli(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "loopdeck", "check", str(CALC)],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "all expectations met" in done.stdout


@pytest.mark.slow
async def test_an_acp_permission_is_approved_from_the_inbox_of_another_console(
    tmp_path: Path,
) -> None:
    """A headless ACP run that waits (`--approve wait`); a console on the same store, its
    inbox, `a`: the agent is answered allow-once and the run meets its goal."""
    from console_helpers import wait_until
    from store_helpers import last_json, start_runner, wait_for_pending

    from loopdeck.tui.app import ConsoleStart, LoopdeckApp
    from loopdeck.tui.fleet_screen import FleetScreen
    from loopdeck.tui.inbox import InboxScreen

    db = tmp_path / "s.db"
    runner = start_runner(CALC, "solve", db, "--approve", "wait")
    try:
        pending = await wait_for_pending(db, 60.0)
        assert (pending["call_id"], pending["tool"]) == ("c2", "edit")
        app = LoopdeckApp(ConsoleStart.for_fleet(db))
        async with app.run_test(size=(120, 40)) as pilot:
            await wait_until(pilot, lambda: isinstance(app.screen, FleetScreen))
            await pilot.press("i")
            await wait_until(pilot, lambda: isinstance(app.screen, InboxScreen))
            inbox = app.screen
            await wait_until(pilot, lambda: len(inbox.entries) == 1, timeout=60)
            await pilot.press("a")
            await wait_until(pilot, lambda: not inbox.entries, timeout=60)
        out, err = runner.communicate(timeout=120)
    finally:
        runner.kill()
    summary = last_json(out)
    assert summary["stop_reason"] == "goal_met", err
    assert [c["status"] for c in summary["calls"]] == ["executed", "executed"]
    assert _agents() == []


class SaysOnLoops:
    """The operator's say on each repeated call, in turn."""

    def __init__(self, *says: str) -> None:
        self.says = list(says)
        self.asked: list[str] = []

    async def answer(self, run_id: str, question_id: str, question: str) -> Any:
        from loopdeck.core.approvals import Answer

        self.asked.append(question)
        return Answer(text=self.says.pop(0), by="test")


@pytest.mark.slow
async def test_the_operator_nudges_an_acp_loop_then_stops_it() -> None:
    operator = SaysOnLoops("nudge edit calc.py instead of reading it again", "stop")
    outcome, rec = await _run("loop", answerer=operator)
    assert outcome.stop_reason is StopReason.NO_PROGRESS, outcome.detail
    assert outcome.detail.endswith("stopped by test")
    # Nudged, the agent went on: a second round, whose repeat the operator stopped (a repeat
    # the agent sends after its turn is cut is blocked without asking again).
    assert [e.answer.split()[0] for e in rec.kinds("question_answered")] == ["nudge", "stop"]
    assert "repeats a call from the same state" in operator.asked[0]
    assert _agents() == []


@pytest.mark.slow
async def test_a_repeat_the_operator_allows_runs_and_the_review_judges_the_turn() -> None:
    operator = SaysOnLoops("allow")
    outcome, rec = await _run("loop", answerer=operator)
    assert outcome.stop_reason is StopReason.STALLED, outcome.detail  # read twice, no change
    assert [e.status for e in rec.kinds("tool_finished")] == [CallStatus.EXECUTED] * 2


@pytest.mark.slow
async def test_pause_at_asks_mid_turn_and_a_raised_cap_lets_the_agent_go_on() -> None:
    operator = SaysOnLoops("raise 2")
    outcome, rec = await _run("runaway", answerer=operator, pause_at=0.5)
    # Asked mid-turn at 0.4 USD (past half of 0.5); raised to 2, the turn went on past the
    # old cap, ended, and the review stopped the run (the agent changed nothing).
    assert [e.topic for e in rec.kinds("question_asked")] == ["budget"]
    assert outcome.stop_reason is StopReason.STALLED, outcome.detail
    assert outcome.cost_usd == 0.6
