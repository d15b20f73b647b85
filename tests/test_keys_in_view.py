"""Every key line stays readable and in view (issue 38, item 4): words at 80x24, never bare
letters; a dialog's keys inside the screen whatever its evidence, never under a toast; a
stopped run fits; `m` on an ended run takes what is typed next, never as the run's keys."""

from __future__ import annotations

import re
from typing import Any

import pytest
from conftest import SAMPLES
from console_helpers import finished, notices, run_screen, screen_lines, wait_until

from loopdeck.core import AutoApprover
from loopdeck.operator.approval_queue import ApprovalQueue
from loopdeck.operator.launch import RunOptions, prepare_run
from loopdeck.operator.session import RunSession
from loopdeck.tui.app import ConsoleStart, LoopdeckApp
from loopdeck.tui.dialogs import ApprovalDialog
from loopdeck.tui.inbox import InboxScreen

SIZES = [(80, 24), (100, 30)]
ids = lambda s: f"{s[0]}x{s[1]}"  # noqa: E731


def stored_app(env: str, script: str, db: Any, auto: bool = False) -> LoopdeckApp:
    """A console on one run recorded in `db`: its inbox key is offered, as under `loopdeck run`."""
    queue = ApprovalQueue()
    options = RunOptions(env=str(SAMPLES / env), script=script, run_id="run0test0001")
    prepared = prepare_run(options, approver=AutoApprover() if auto else queue)
    return LoopdeckApp(ConsoleStart.for_run(RunSession.adopted(prepared, queue, location=db)))


def shown_whole(app: LoopdeckApp, selector: str) -> bool:
    """Every cell of the widget is inside the screen and is the widget's own: nothing clips
    it and nothing (a toast) is drawn over it."""
    widget = app.screen.query_one(selector)
    region = widget.region
    if region.area == 0 or not app.screen.region.contains_region(region):
        return False
    return all(
        app.screen.get_widget_at(x, y)[0] is widget
        for y in range(region.y, region.bottom)
        for x in range(region.x, region.right)
    )


@pytest.mark.parametrize("size", SIZES, ids=ids)
async def test_the_run_keys_are_words_at_every_size(tmp_path, size) -> None:
    app = stored_app("order_support", "solve", tmp_path / "s.db")
    async with app.run_test(size=size) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, ApprovalDialog))
        await pilot.press("escape")
        await wait_until(pilot, lambda: app.screen is run_screen(app))
        await pilot.pause()
        line = screen_lines(app)[-1]
        for words in ("w wait", "t log", "m msg", "s stop", "k kill", "p pause", "q quit"):
            assert words in line, line
        assert "i inbox" in line, line
        assert not re.search(r"(^|\s)[a-z](\s+[a-z](\s|$))", line), line  # no bare letters


@pytest.mark.parametrize("size", SIZES, ids=ids)
async def test_a_toast_never_covers_the_approval_keys(tmp_path, size) -> None:
    app = stored_app("order_support", "solve", tmp_path / "s.db")
    async with app.run_test(size=size, notifications=True) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, ApprovalDialog))
        app.notify("a toast long enough to wrap over two lines of the rack " * 2, title="t")
        await wait_until(pilot, lambda: bool(app.screen.query("Toast")))
        await pilot.pause()
        assert shown_whole(app, "#approval-keys")
        toast = app.screen.query_one("Toast").region
        assert not toast.overlaps(app.screen.query_one("#approval-box").region)


@pytest.mark.parametrize("size", SIZES, ids=ids)
async def test_an_acp_diff_keeps_the_approval_keys_in_view(tmp_path, size) -> None:
    app = stored_app("calc_acp", "solve", tmp_path / "s.db")
    async with app.run_test(size=size, notifications=True) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, ApprovalDialog), timeout=60)
        await pilot.pause()
        assert "return a + b" in "\n".join(screen_lines(app))  # the diff is shown
        assert shown_whole(app, "#approval-keys")


@pytest.mark.parametrize("size", SIZES, ids=ids)
async def test_a_stopped_run_fits_the_screen(tmp_path, size) -> None:
    app = stored_app("service_outage", "loop", tmp_path / "s.db", auto=True)
    async with app.run_test(size=size) as pilot:
        await wait_until(pilot, lambda: finished(app))
        await pilot.pause()
        screen = run_screen(app)
        assert screen is app.screen and screen.max_scroll_y == 0
        for selector in ("#outcome", "#calls", "#bottom", "KeysBar"):
            assert screen.region.contains_region(screen.query_one(selector).region), selector
        assert "Stopped · stalled" in "\n".join(screen_lines(app))


async def test_m_on_an_ended_run_takes_the_letters_typed_next(tmp_path) -> None:
    app = stored_app("order_support", "solve", tmp_path / "s.db", auto=True)
    async with app.run_test(size=(80, 24), notifications=True) as pilot:
        await wait_until(pilot, lambda: finished(app))
        screen = run_screen(app)
        await pilot.press("m")
        await wait_until(pilot, lambda: any("ended" in m for m in notices(app)))
        await pilot.press("s", "i", "q")
        await pilot.pause()
        assert not any(isinstance(s, InboxScreen) for s in app.screen_stack)
        assert app.is_running and run_screen(app) is screen
        assert screen.outcome is not None and screen.outcome.stop_reason.value == "goal_met"
        await pilot.press("escape")
        await wait_until(pilot, lambda: app.screen is screen)


async def test_a_line_with_more_keys_than_room_says_more(tmp_path) -> None:
    """The inbox over a run at 80 columns has more keys than the line holds, words shortened:
    it shows those that fit, whole, then `^p more` (the palette's `keys` lists them all),
    never a key cut at the edge."""
    app = stored_app("order_support", "solve", tmp_path / "s.db")
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, ApprovalDialog))
        await pilot.press("escape")
        await wait_until(pilot, lambda: app.screen is run_screen(app))
        await pilot.press("i")
        await wait_until(pilot, lambda: isinstance(app.screen, InboxScreen))
        await pilot.pause()
        line = screen_lines(app)[-1]
        assert line.rstrip().endswith("^p more"), line
        assert line.startswith(" a approve  e edit  g grant  r reject"), line
        assert not re.search(r"(^|\s)[a-z](\s+[a-z](\s|$))", line), line  # no bare letters
