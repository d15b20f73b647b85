"""A replay of a run that had grants, stepped back from its stop: whatever the terminal's
height, the run screen never scrolls as a whole (the Grants panel, the Stopped panel, a long
goal and a long stop all fit or give way), no spinner turns on a run that is over, and no
key is offered that a replay does not have (`G`)."""

from __future__ import annotations

from pathlib import Path

import pytest
from console_helpers import run_screen, screen_lines, wait_until
from test_decision_refusals import Recorded, record

from loopdeck.core.decision_events import GrantGiven
from loopdeck.core.events import RunStarted, RunStopped, StateChanged
from loopdeck.core.replay_events import RunForked
from loopdeck.core.states import RunState, StopReason
from loopdeck.operator.links import ReplayLink
from loopdeck.store.opening import open_store
from loopdeck.tui.app import ConsoleStart, LoopdeckApp
from loopdeck.tui.grants_panel import GrantsPanel
from loopdeck.tui.panels import SPINNER
from loopdeck.tui.replay import ReplayScreen

RUN = "run0grants01"


async def _recorded(db: Path, grants: int) -> None:
    run = Recorded(RUN)
    run.add(RunStarted, env="decisions", script="files", model="scripted", mode="react",
            goal="Bring the orders service back, healthy, 3 replicas. " * 6, budget={})  # fmt: skip
    run.add(StateChanged, source=RunState.READY, target=RunState.DECIDING)
    run.add(RunForked, source="run0source01", at_call="c5", through_seq=9)
    for n in range(1, grants + 1):
        run.add(GrantGiven, grant_id=f"g{n}", call_id=f"c{n}", tool="write_file",
                scope="tool", by="cli:ops")  # fmt: skip
    run.add(RunStopped, state=RunState.STOPPED, stop_reason=StopReason.GOAL_MET,
            detail="the goal check passed " * 80)  # fmt: skip
    store = await open_store(db)
    try:
        await record(store, run)
    finally:
        await store.close()


async def _looked_at(db: Path, height: int) -> None:
    app = LoopdeckApp(ConsoleStart.for_link(ReplayLink(db, RUN)))
    async with app.run_test(size=(100, height)) as pilot:
        await wait_until(
            pilot, lambda: isinstance(app.screen, ReplayScreen) and app.screen.position > 0
        )
        screen = run_screen(app)
        assert screen is not None and screen.view.finished
        await pilot.pause()
        assert screen.max_scroll_y == 0, f"at its stop, 100x{height}"
        await pilot.press("left")
        await wait_until(pilot, lambda: not screen.view.finished)
        await pilot.pause()
        assert screen.max_scroll_y == 0, f"stepped back, 100x{height}"
        header = screen_lines(app)[0]
        assert not any(mark in header for mark in SPINNER), header
        assert header.rstrip().endswith("…"), header  # cut, never a dangling "·"
        panel = screen.query_one(GrantsPanel)
        if panel.display:
            assert "G revokes" not in str(panel.border_title)
        assert " · G" not in str(screen.query_one("#calls").border_title)


@pytest.mark.parametrize("grants", [1, 6])
async def test_a_replay_stepped_back_never_scrolls_whole(tmp_path: Path, grants: int) -> None:
    """The three sizes the console is drawn at (each height in `make stress`, below)."""
    db = tmp_path / "s.db"
    await _recorded(db, grants)
    for height in (24, 30, 48):
        await _looked_at(db, height)


@pytest.mark.slow  # a console a height: seconds in all
@pytest.mark.parametrize("grants", [1, 6])
async def test_a_replay_stepped_back_never_scrolls_whole_at_any_height(
    tmp_path: Path, grants: int
) -> None:
    db = tmp_path / "s.db"
    await _recorded(db, grants)
    for height in range(24, 50):
        await _looked_at(db, height)
