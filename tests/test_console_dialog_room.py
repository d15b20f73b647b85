"""An approval dialog shows its arguments before it can be approved, whatever the room: a run
opened from the fleet at 80x24 (another run's "waits for your approval" toast takes a strip
below the box), a model whose words run long, the reason box open. What gives way is the words above
the arguments (they scroll) and the blank rows, never the title; once the room is back the
box is as tall as what it shows."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from console_helpers import screen_lines, start_from_fleet, wait_until
from test_console_refusals import DialogHost
from textual.widgets import Input

from loopdeck.core.approvals import request_for
from loopdeck.tui.app import ConsoleStart, LoopdeckApp
from loopdeck.tui.dialogs import ApprovalDialog

LONG_WHY = "\n".join(f"line {n} of what the model said about this write" for n in range(40))


def argument_rows(app: Any) -> int:
    """How many rows of the arguments' text are on screen and the dialog's own: nothing
    (a toast, the box's foot) drawn over them, nothing scrolled out of view."""
    texts = app.screen.query("#approval-args Static")
    if not texts:
        return 0
    text = texts.first()
    x = text.region.x + 1
    return sum(app.screen.get_widget_at(x, y)[0] is text for y in range(app.screen.size.height))


def shown(app: Any, selector: str) -> bool:
    widget = app.screen.query_one(selector)
    region = widget.region
    return region.area > 0 and all(
        app.screen.get_widget_at(region.x, y)[0] is widget for y in range(region.y, region.bottom)
    )


def _request(rationale: str) -> Any:
    return request_for(
        run_id="r1", call_id="c1", tool="update_delivery_address",
        args={"order_id": "ORD-1042", "new_address": "7 New Street, Springfield"},
        state_hash="s1", fingerprint="f1", plan_step="3. Update the address", ttl_s=300,
        rationale=rationale,
    )  # fmt: skip


async def test_from_the_fleet_at_80x24_the_arguments_show_under_the_toast(tmp_path) -> None:
    app = LoopdeckApp(ConsoleStart.for_fleet(tmp_path / "s.db"))
    async with app.run_test(size=(80, 24), notifications=True) as pilot:
        await start_from_fleet(pilot, app, "order_support", "solve")
        await wait_until(pilot, lambda: isinstance(app.screen, ApprovalDialog))
        # Another run's wait (this run's own is not toasted over its open dialog).
        app.notify("run r9 waits for your approval", title="waiting", timeout=600)
        await wait_until(pilot, lambda: bool(app.screen.query("Toast")))
        await pilot.pause()
        assert shown(app, "Toast")  # below the box
        assert argument_rows(app) >= 3, "\n".join(screen_lines(app))
        assert shown(app, "#approval-keys") and shown(app, "#approval-tool")
        assert shown(app, "#approval-title")  # "Approve this write?": the words give way
        assert "Approve this write?" in "\n".join(screen_lines(app))
        app.clear_notifications()  # the toast goes: the whole dialog, fingerprint included
        await wait_until(pilot, lambda: not app.screen.query("Toast"))
        await wait_until(
            pilot, lambda: shown(app, "#approval-ids") and shown(app, "#approval-title")
        )
        assert argument_rows(app) == 4 and shown(app, "#approval-meta")


@pytest.mark.parametrize("size", [(80, 24), (160, 48)])
async def test_long_words_of_the_model_give_way_to_the_arguments(size) -> None:
    app = DialogHost()
    async with app.run_test(size=size) as pilot:
        dialog = ApprovalDialog(_request(LONG_WHY), 1, "write", lambda: datetime.now(UTC))
        app.push_screen(dialog)
        await wait_until(pilot, lambda: app.screen is dialog and argument_rows(app) == 4)
        assert shown(app, "#approval-keys") and shown(app, "#approval-ids")
        assert "update_delivery_address" in "\n".join(screen_lines(app))  # which tool
        words = dialog.query_one("#approval-words")
        assert words.max_scroll_y > 0  # the rest of the words: scrolled to, not cut
        await pilot.press("r")  # the reason box takes rows too: the arguments keep theirs
        await wait_until(pilot, lambda: isinstance(dialog.focused, Input))
        await pilot.pause()
        assert argument_rows(app) >= 2 and shown(app, "#reject-reason")


async def test_a_box_with_room_is_as_tall_as_what_it_shows() -> None:
    app = DialogHost()
    async with app.run_test(size=(160, 48)) as pilot:
        dialog = ApprovalDialog(_request("Step 3."), 1, "write", lambda: datetime.now(UTC))
        app.push_screen(dialog)
        await wait_until(pilot, lambda: app.screen is dialog and argument_rows(app) == 4)
        box = dialog.query_one("#approval-box")
        assert not box.has_class("-full") and box.max_scroll_y == 0
        assert box.size.height < 30  # no blank rows below the words


async def test_a_write_whose_arguments_are_not_drawn_is_not_approved() -> None:
    """However short the room (here a terminal far below 80x24), `a` and `g` act only while
    the arguments' first lines are drawn: else the dialog says so and stays."""
    app = DialogHost()
    async with app.run_test(size=(80, 8)) as pilot:
        decided: list[Any] = []
        dialog = ApprovalDialog(_request(LONG_WHY), 1, "write", lambda: datetime.now(UTC))
        app.push_screen(dialog, decided.append)
        await wait_until(pilot, lambda: app.screen is dialog and dialog.is_mounted)
        await pilot.pause()
        assert argument_rows(app) < 2
        await pilot.press("a", "g")
        await pilot.pause()
        assert app.screen is dialog and decided == [] and dialog.mode == ""
        assert "Not approved" in str(dialog.query_one("#approval-keys").render())
        await pilot.resize_terminal(80, 24)
        await wait_until(pilot, lambda: argument_rows(app) == 4)
        await pilot.press("a")
        await wait_until(pilot, lambda: len(decided) == 1)
        assert decided[0].approved


async def test_a_write_is_not_approved_before_its_arguments_are_laid_out() -> None:
    """`a` the moment the dialog is pushed (composed, not laid out: its arguments take no
    row yet) does nothing."""
    app = DialogHost()
    async with app.run_test(size=(100, 30)) as pilot:
        decided: list[Any] = []
        dialog = ApprovalDialog(_request("why"), 1, "write", lambda: datetime.now(UTC))
        app.push_screen(dialog, decided.append)
        dialog.action_approve()  # before any frame of it
        await wait_until(pilot, lambda: app.screen is dialog and argument_rows(app) == 4)
        assert decided == []
        await pilot.press("a")
        await wait_until(pilot, lambda: len(decided) == 1)
