"""Every key line stays readable and in view (issue 38, item 4): words at 80x24, never bare
letters; a dialog's keys inside the screen whatever its evidence, never under a toast; a
stopped run fits; `m` on an ended run takes what is typed next, never as the run's keys."""

from __future__ import annotations

import re
from typing import Any

import pytest
from conftest import SAMPLES
from console_helpers import finished, notices, run_screen, screen_lines, wait_until
from textual.widgets import Input

from loopdeck.core import AutoApprover
from loopdeck.operator.approval_queue import ApprovalQueue
from loopdeck.operator.launch import RunOptions, prepare_run
from loopdeck.operator.session import RunSession
from loopdeck.tui.app import ConsoleStart, LoopdeckApp
from loopdeck.tui.dialogs import ApprovalDialog, ConfirmQuitDialog
from loopdeck.tui.inbox import InboxScreen
from loopdeck.tui.message_dialog import MessageDialog

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
        assert shown_whole(app, "#approval-keys")
        assert '"path": "calc.py"' in "\n".join(screen_lines(app))  # the arguments
        # The diff comes in the agent's words, which give way to the arguments in a short
        # box: they scroll, and the diff is read there.
        words = app.screen.query_one("#approval-words")
        for _ in range(words.max_scroll_y + 1):
            if "return a + b" in "\n".join(screen_lines(app)):
                break
            words.scroll_down(animate=False)
            await pilot.pause()
        assert "return a + b" in "\n".join(screen_lines(app))


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


@pytest.mark.parametrize("width", [80, 70])
async def test_a_line_with_more_keys_than_room_says_more(tmp_path, width) -> None:
    """The inbox over a run: at 80 columns every key, one word each, one space apart; on a
    narrower line it shows those that fit, whole, then `^p more` (the palette's `keys` lists
    them all), never a key cut at the edge."""
    app = stored_app("order_support", "solve", tmp_path / "s.db")
    async with app.run_test(size=(width, 24)) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, ApprovalDialog))
        await pilot.press("escape")
        await wait_until(pilot, lambda: app.screen is run_screen(app))
        await pilot.press("i")
        await wait_until(pilot, lambda: isinstance(app.screen, InboxScreen))
        await pilot.pause()
        line = screen_lines(app)[-1]
        assert line.startswith(" a approve r reject e edit g grant m msg esc back s stop"), line
        if width == 80:
            assert line.rstrip().endswith("p pause q quit") and "more" not in line, line
        else:
            assert line.rstrip().endswith("^p more"), line
        assert not re.search(r"(^|\s)[a-z](\s+[a-z](\s|$))", line), line  # no bare letters


async def test_at_a_phones_width_the_approval_keys_line_has_both_answers(tmp_path) -> None:
    """A phone's browser gives the console about 43 columns: the line keeps the keys that fit,
    first those that answer (it had approve, edit and grant, and no reject)."""
    app = stored_app("order_support", "solve", tmp_path / "s.db")
    async with app.run_test(size=(43, 40)) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, ApprovalDialog))
        await pilot.pause()
        line = screen_lines(app)[-1]
        assert re.search(r"\ba approve", line, re.I) and re.search(r"\br reject", line, re.I)


async def test_over_a_dialog_the_keys_line_has_the_dialogs_keys_and_those_that_act(
    tmp_path,
) -> None:
    """The run's own keys (`t`, `o`, `m`…) do nothing under a dialog: the line over it says
    the dialog's keys and the console's that act there; while a box has the focus, the ctrl
    keys that act from it."""
    app = stored_app("order_support", "unknown-outcome", tmp_path / "s.db")
    async with app.run_test(size=(160, 48)) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, ApprovalDialog))
        await pilot.pause()
        line = screen_lines(app)[-1]
        for words in ("a Approve", "r Reject", "esc Later", "s Stop after tools", "q Quit"):
            assert words in line, line
        for run_key in (" w ", " t ", " m ", " o ", " f ", " i "):
            assert run_key not in line, line
        await pilot.press("r")
        await wait_until(pilot, lambda: isinstance(app.screen.focused, Input))
        await pilot.pause()
        line = screen_lines(app)[-1]
        for words in ("esc Back", "^s Stop", "^k Kill", "^q Quit"):
            assert words in line, line
        for plain_key in (" a ", " r ", " s ", " k ", " q "):
            assert plain_key not in line, line


async def test_every_text_box_says_the_ctrl_keys_that_act_from_it(tmp_path) -> None:
    app = stored_app("order_support", "solve", tmp_path / "s.db")
    async with app.run_test(size=(160, 48)) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, ApprovalDialog))
        dialog = app.screen

        def said(screen: Any, selector: str) -> str:
            return str(screen.query_one(selector).render())

        await pilot.press("r")  # the reason box
        await wait_until(pilot, lambda: isinstance(dialog.focused, Input))
        assert all(k in said(dialog, "#approval-keys") for k in ("ctrl+s", "ctrl+k", "ctrl+q"))
        await pilot.press("ctrl+q")  # it does what it says: quitting, asked first
        await wait_until(pilot, lambda: isinstance(app.screen, ConfirmQuitDialog))
        await pilot.press("n")
        await wait_until(pilot, lambda: app.screen is dialog)
        await pilot.press("escape", "e")  # the arguments' editor
        await wait_until(pilot, lambda: dialog.mode == "edit")
        assert "ctrl+q" in said(dialog, "#approval-keys")
        await pilot.press("escape", "escape", "m")  # the message box, over the run
        await wait_until(pilot, lambda: isinstance(app.screen, MessageDialog))
        assert "ctrl+q" in said(app.screen, "#message-keys")
        await pilot.press("escape")


async def test_the_too_small_notice_stays_whole_under_a_dialog(tmp_path) -> None:
    """Under 40x16 (from there, one column shows the run: `test_run_phone.py`)."""
    app = stored_app("order_support", "solve", tmp_path / "s.db")
    async with app.run_test(size=(39, 20)) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, ApprovalDialog))
        await pilot.pause()
        first = screen_lines(app)[0]
        assert "39x20" in first and "enlarge to 40x16" in first, first
