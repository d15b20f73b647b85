"""A call approved with edited arguments: the Call panel's title never names what did not run.
An ACP terminal's call is named by its command (`terminal: COMMAND`); approved with another
command, its title keeps the kind and says it was edited, the arguments below what ran."""

from __future__ import annotations

from pathlib import Path

from console_helpers import run_screen, wait_until
from test_decision_refusals import Recorded, record

from loopdeck.core.decision_events import ApprovalDecided
from loopdeck.core.events import CallProposed, CallStatus, RunStopped, ToolFinished
from loopdeck.core.states import RunState, StopReason
from loopdeck.operator.links import ReplayLink
from loopdeck.store.opening import open_store
from loopdeck.tui.app import ConsoleStart, LoopdeckApp
from loopdeck.tui.panels import CallDetail
from loopdeck.tui.replay import ReplayScreen

RUN = "run0edited01"
ASKED = {"command": "sh", "args": ["-c", "echo A; rm -rf build"], "cwd": ".", "env": []}
RAN = {"command": "sh", "args": ["-c", "echo B"], "cwd": ".", "env": []}


async def _recorded(db: Path) -> None:
    run = Recorded(RUN).started(RunState.DECIDING)
    run.add(CallProposed, call_id="c1", round=1, tool="terminal: sh -c 'echo A; rm -rf build'",
            args=ASKED, risk="write", fingerprint="f1", state_hash="s1")  # fmt: skip
    run.add(ApprovalDecided, call_id="c1", approved=True, reason="", by="console", args=RAN,
            changes=["args: ['-c', 'echo A; rm -rf build'] → ['-c', 'echo B']"])  # fmt: skip
    run.add(ToolFinished, call_id="c1", tool="terminal: sh -c 'echo A; rm -rf build'",
            status=CallStatus.EXECUTED, result={"data": {"exit_code": 0, "output": "B\n"}},
            duration_ms=3.0)  # fmt: skip
    run.add(RunStopped, state=RunState.STOPPED, stop_reason=StopReason.GOAL_MET, detail="done")
    store = await open_store(db)
    try:
        await record(store, run)
    finally:
        await store.close()


async def test_an_edited_terminals_title_never_names_the_command_that_did_not_run(
    tmp_path: Path,
) -> None:
    db = tmp_path / "s.db"
    await _recorded(db)
    app = LoopdeckApp(ConsoleStart.for_link(ReplayLink(db, RUN)))
    async with app.run_test(size=(160, 48)) as pilot:
        await wait_until(pilot, lambda: isinstance(run_screen(app), ReplayScreen))
        screen = run_screen(app)
        assert screen is not None
        panel = screen.query_one(CallDetail)
        await wait_until(pilot, lambda: "c1" in str(panel.border_title))
        said = str(panel.border_title)
        assert "echo A" not in said and "edited" in said, said
        assert said.startswith("Call c1 · terminal"), said
        assert "echo B" in str(screen.query_one("#detail-body").render())
