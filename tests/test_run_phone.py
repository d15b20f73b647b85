"""The run screen on a phone's screen (`loopdeck serve` in a phone's browser, about 43x40
upright, 90x20 on its side): under 80x24 one column (`phone_panels`) shows the run, what
waits and the keys that decide it, where a notice asking to enlarge to 80x24 hid it; the
wide layout at 80x24 and above is as it was, through a resize there and back."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import SAMPLES
from console_helpers import console_app, run_screen, screen_lines, screen_text, wait_until
from textual.widgets import Input

from loopdeck.tui.dialogs import ApprovalDialog
from loopdeck.tui.phone_panels import PhoneColumn

WIDE = ("#top", "#calls", "#bottom", "#run-header", "#goal")


def shown(app: Any, selector: str) -> bool:
    widget = app.screen.query_one(selector)
    return widget.display and widget.region.area > 0


async def at_the_run_with_a_write_waiting(pilot: Any, app: Any) -> None:
    """The write's dialog put off (esc): the run screen, its write still waiting."""
    await wait_until(pilot, lambda: isinstance(app.screen, ApprovalDialog))
    await pilot.press("escape")
    await wait_until(pilot, lambda: app.screen is run_screen(app))
    await wait_until(pilot, lambda: "update_delivery_address" in screen_text(app))
    await pilot.pause()


async def test_at_43x40_the_run_shows_the_waiting_write_and_its_keys() -> None:
    app = console_app(SAMPLES / "order_support", "solve")
    async with app.run_test(size=(43, 40)) as pilot:
        await at_the_run_with_a_write_waiting(pilot, app)
        text = screen_text(app)
        assert "too small" not in text and "enlarge" not in text, text
        assert shown(app, "#phone") and shown(app, "#phone-waiting")
        assert not any(shown(app, selector) for selector in ("#top", "#calls", "#bottom"))
        waiting = app.screen.query_one("#phone-waiting")
        assert "update_delivery_address" in str(waiting.render())
        assert "ORD-1042" in str(waiting.render())  # its arguments
        assert screen_lines(app)[-1].startswith(" a approve r reject"), screen_lines(app)[-1]
        assert "Calls · 3" in text and "Budgets" in text, text
        await pilot.press("r")  # its dialog, the reason box open
        await wait_until(pilot, lambda: isinstance(app.screen, ApprovalDialog))
        dialog = app.screen
        await wait_until(pilot, lambda: isinstance(dialog.focused, Input))
        assert dialog.mode == "reason" and dialog.request.tool == "update_delivery_address"
        await pilot.press("escape", "escape")  # back from the box, then later
        await wait_until(pilot, lambda: app.screen is run_screen(app))
        await pilot.press("a")  # its dialog, where `a` approves
        await wait_until(pilot, lambda: isinstance(app.screen, ApprovalDialog))
        await pilot.press("a")
        await wait_until(pilot, lambda: "GOAL_MET" in screen_text(app))
        assert "update_delivery_address" in screen_text(app)  # its call, in the list


async def test_a_resize_to_a_phone_and_back_keeps_the_wide_layout() -> None:
    app = console_app(SAMPLES / "order_support", "solve")
    async with app.run_test(size=(160, 48)) as pilot:
        await at_the_run_with_a_write_waiting(pilot, app)
        screen = app.screen
        before = {selector: screen.query_one(selector).region for selector in WIDE}
        keys = screen_lines(app)[-1]
        assert not shown(app, "#phone") and " a approve" not in keys
        await pilot.resize_terminal(43, 40)
        await wait_until(pilot, lambda: shown(app, "#phone") and not shown(app, "#top"))
        await wait_until(pilot, lambda: screen_lines(app)[-1].startswith(" a approve"))
        assert screen.focused is screen.query_one(PhoneColumn)  # the arrows scroll it
        await pilot.resize_terminal(160, 48)
        await wait_until(pilot, lambda: not shown(app, "#phone") and shown(app, "#top"))
        await pilot.pause()
        assert {selector: screen.query_one(selector).region for selector in WIDE} == before
        assert screen_lines(app)[-1] == keys
        assert screen.focused is screen.query_one("#calls")


async def test_under_40x16_a_notice_says_to_enlarge() -> None:
    app = console_app(SAMPLES / "order_support", "solve")
    async with app.run_test(size=(39, 30)) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, ApprovalDialog))
        await pilot.press("escape")
        await wait_until(pilot, lambda: app.screen is run_screen(app))
        await pilot.pause()
        assert "39x30 is too small: enlarge to 40x16" in screen_lines(app)[0]


def _copying(run_id: str, message: str) -> Any:
    """A live run whose call c1 reported 3 of 10 done, and whose c2 executed."""
    from test_decision_refusals import Recorded

    from loopdeck.core.events import CallProposed, CallStatus, ToolFinished
    from loopdeck.core.progress_events import ToolProgress
    from loopdeck.core.states import RunState

    run = Recorded(run_id).started(RunState.DECIDING)
    for call_id in ("c2", "c1"):
        run.add(CallProposed, call_id=call_id, round=1, tool="copy_files", args={},
                risk="read", fingerprint="f" * 8, state_hash="s" * 8)  # fmt: skip
    run.add(ToolFinished, call_id="c2", tool="copy_files", status=CallStatus.EXECUTED,
            result={"data": 1}, duration_ms=5.0)  # fmt: skip
    return run.add(ToolProgress, call_id="c1", tool="copy_files", progress=3, total=10,
                   message=message)  # fmt: skip


@pytest.mark.parametrize("message", ["copying", "copying " + "a-long-file-name/" * 8])
async def test_at_43x40_a_running_calls_progress_shows_in_the_calls_list(
    tmp_path: Any, message: str
) -> None:
    """As the wide Calls table says it ("running 30% copying"); a long message is cut where
    the line ends, the tool before it keeping some room. It said "running", nothing more."""
    from test_decision_refusals import record

    from loopdeck.operator.store_link import StoreLink
    from loopdeck.store.opening import open_store
    from loopdeck.tui.app import ConsoleStart, LoopdeckApp
    from loopdeck.tui.phone_panels import PhoneCalls

    db = tmp_path / "s.db"
    store = await open_store(db)
    try:
        await record(store, _copying("r1", message))
    finally:
        await store.close()
    app = LoopdeckApp(ConsoleStart.for_link(StoreLink(db, "r1")))
    async with app.run_test(size=(43, 40)) as pilot:
        await wait_until(pilot, lambda: run_screen(app) is not None)
        calls = run_screen(app).query_one(PhoneCalls)
        await wait_until(pilot, lambda: "c1" in str(calls.render()))
        await pilot.pause()
        lines = str(calls.render()).splitlines()
        running = next(line for line in lines if line.startswith("c1"))
        assert "running 30% copying" in running, lines
        assert "copy_" in running, lines  # the tool keeps some room
        width = calls.content_size.width
        assert all(len(line) <= width for line in lines), (width, lines)
        assert running.endswith("…") == (len(message) > len("copying")), running
        assert next(line for line in lines if line.startswith("c2")).endswith("executed")
