"""The console's `p` is judged as `loopdeck pause/resume` judges it (`deciding.pause_refusal`):
a pause of a run with a pause on its way, or a resume of one not paused, is refused in a toast
and nothing is sent; the run's own console judges by its run's control."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
from console_helpers import notices, run_screen, wait_until
from test_decision_refusals import Recorded, record

from loopdeck.core.states import RunState
from loopdeck.operator.store_link import StoreLink
from loopdeck.store.opening import open_store
from loopdeck.tui.app import ConsoleStart, LoopdeckApp

SIZE = (160, 48)


def _sent(db: Path) -> list[str]:
    with sqlite3.connect(db) as store:
        return [row[0] for row in store.execute("SELECT command FROM commands ORDER BY id")]


async def test_p_on_an_attached_run_with_a_pause_on_its_way_is_refused_in_a_toast(
    tmp_path: Path,
) -> None:
    """`p` twice before the runner took the first pause: the second sent another pause (the
    view, from the events, still said running), where `loopdeck pause` refuses it."""
    db = tmp_path / "s.db"
    store = await open_store(db)
    try:
        await record(store, Recorded("r1").started(RunState.PLANNING))
    finally:
        await store.close()
    app = LoopdeckApp(ConsoleStart.for_link(StoreLink(db, "r1")))
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: run_screen(app) is not None)
        await wait_until(pilot, lambda: run_screen(app).view.run_id == "r1")
        await pilot.press("p")
        await wait_until(pilot, lambda: _sent(db) == ["pause"])
        await pilot.press("p")
        said = "r1 is already paused (sent, not taken yet): `loopdeck resume r1` resumes it"
        await wait_until(pilot, lambda: said in notices(app))
        assert _sent(db) == ["pause"]


@pytest.mark.slow  # seconds: a console on a run of its own (`make stress` runs it, CI too)
async def test_the_runs_own_console_judges_p_by_its_runs_control() -> None:
    """A run of this console: the same words, judged by the run's control (which never lags
    its events): a second pause is refused, nothing recorded of it; a resume goes."""
    from conftest import SAMPLES
    from console_helpers import console_app

    from loopdeck.tui.dialogs import ApprovalDialog

    app = console_app(SAMPLES / "order_support", "solve")
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, ApprovalDialog))
        screen = run_screen(app)
        assert screen is not None and screen.runtime is not None
        seen: list[Any] = []
        screen.runtime.bus.subscribe(seen.append)
        await pilot.press("escape")
        await pilot.press("p")
        await wait_until(pilot, lambda: screen.runtime.control.paused)
        run_id = screen.view.run_id
        said = await screen.link.pause_or_resume("pause", "console")
        assert said == f"{run_id} is already paused: `loopdeck resume {run_id}` resumes it"
        assert await screen.link.pause_or_resume("resume", "console") is None
        await wait_until(pilot, lambda: not screen.runtime.control.paused)
        assert await screen.link.pause_or_resume("resume", "console") == (
            f"{run_id} is not paused: nothing to resume"
        )
        pauses = [e.command for e in seen if e.kind == "operator_command"]
        assert pauses == ["pause", "resume"]
        await pilot.press("k")
        await pilot.press("y")
        await wait_until(pilot, lambda: screen.outcome is not None)
