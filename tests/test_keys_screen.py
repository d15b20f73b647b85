"""The palette's `keys` is the console's own keys screen (issue 38, item 7): the keys of the
screen it was opened on, then the console's, each in words, never Textual's generic help
panel. And a box being typed into says what enter does: the inbox's answer and reason box in
its key line, the approval's reason box in its keys."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from conftest import SAMPLES
from console_helpers import console_app, screen_text, wait_until
from test_fleet_in_view import _waiting_runs
from textual.widgets import Input

from loopdeck.tui.app import ConsoleStart, LoopdeckApp
from loopdeck.tui.dialogs import ApprovalDialog
from loopdeck.tui.fleet_screen import FleetScreen
from loopdeck.tui.inbox import InboxScreen
from loopdeck.tui.keys_screen import KeysScreen, key_name, keys_of

SIZES = [(80, 24), (100, 30), (160, 48)]
sizes = pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")


def _key_line(app: Any) -> str:
    return screen_text(app).rstrip().splitlines()[-1]


@sizes
async def test_the_palettes_keys_opens_the_consoles_keys_screen(
    tmp_path: Path, size: tuple[int, int]
) -> None:
    app = LoopdeckApp(ConsoleStart.for_fleet(tmp_path / "s.db"))
    async with app.run_test(size=size) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, FleetScreen))
        fleet = app.screen
        await pilot.press("ctrl+p")
        await pilot.press(*"keys")
        await wait_until(pilot, lambda: "every key of this screen" in screen_text(app))  # found
        await pilot.press("enter")
        await wait_until(pilot, lambda: isinstance(app.screen, KeysScreen))
        assert not app.query("HelpPanel")  # Textual's own is never shown
        await pilot.pause()
        shown = screen_text(app)
        for words in ("On the fleet", "n      New run", "/      Filter", "Everywhere",
                      "q          Quit", "ctrl+p     Commands", "esc back"):  # fmt: skip
            assert words in shown, shown
        await pilot.press("end")  # a list longer than the box scrolls to the runs list's keys
        for words in ("In the focused list", "up    Previous row", "pgdn  A page down"):
            await wait_until(pilot, lambda words=words: words in screen_text(app))
        await pilot.press("escape")
        await wait_until(pilot, lambda: app.screen is fleet)


async def test_the_keys_of_a_run_name_its_own_and_the_consoles() -> None:
    app = console_app(SAMPLES / "order_support", "solve")
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, ApprovalDialog))
        dialog = app.screen
        own, console, _ = keys_of(dialog)
        assert ("a", "Approve", True) in own and ("r", "Reject…", True) in own
        assert ("s", "Stop after tools", True) in console  # the app's, over any dialog
        await pilot.press("escape")
        await wait_until(pilot, lambda: app.screen is not dialog)
        own, console, _ = keys_of(app.screen)
        assert ("t", "Transcript", True) in own
        assert ("k", "Kill now", True) in console
        assert all(words[0].isupper() for _, words, _ in own + console)  # words, in full


def test_a_key_is_named_as_it_is_typed() -> None:
    assert [key_name(k) for k in ("^q", "⏎", "esc", "a", "[")] == [
        "ctrl+q", "enter", "esc", "a", "[",
    ]  # fmt: skip


@sizes
async def test_the_inbox_box_says_what_enter_does(tmp_path: Path, size: tuple[int, int]) -> None:
    """A write's reason box: `enter Reject`; a question's answer box: `enter Send answer`,
    and enter sends what the box holds."""
    db = tmp_path / "s.db"
    await _waiting_runs(db, os.getpid(), {"write0000001": ["approval"]})
    await _waiting_runs(db, os.getpid(), {"asks00000002": ["question"]})
    app = LoopdeckApp(ConsoleStart.for_fleet(db))
    async with app.run_test(size=size) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, FleetScreen))
        await wait_until(pilot, lambda: "1 question waiting" in screen_text(app))
        await pilot.press("i")
        await wait_until(pilot, lambda: isinstance(app.screen, InboxScreen))
        inbox = app.screen
        await wait_until(pilot, lambda: len(inbox.entries) == 2)
        assert " i " not in f" {_key_line(app)} "  # no inbox key on the inbox
        await pilot.press("r")
        box = inbox.query_one("#inbox-reason", Input)
        await wait_until(pilot, lambda: app.focused is box)
        await pilot.press(*"too far")
        await wait_until(pilot, lambda: "enter Reject" in _key_line(app))
        assert "esc Back" in _key_line(app)
        assert box.region.bottom <= app.size.height - 1  # above the key line, in view
        await pilot.press("escape")
        await wait_until(pilot, lambda: not box.display)
        assert "enter" not in _key_line(app)
        await pilot.press("down", "a")
        await wait_until(pilot, lambda: app.focused is box)
        await wait_until(pilot, lambda: "enter Send answer" in _key_line(app))
        await pilot.press(*"ORD-1042", "enter")
        await wait_until(pilot, lambda: not box.display)  # sent: the next entry is selected
        await wait_until(pilot, lambda: len(inbox.entries) == 1)


@pytest.mark.parametrize("key", ["end", "pagedown", "down"])
async def test_the_keys_of_a_replay_at_80x24_scroll_to_the_last(solved_run, key: str) -> None:
    """Every key of "Everywhere" is listed once, the last ones reached by End, PageDown or
    Down (the box is shorter than the list, and says the list scrolls)."""
    from console_helpers import run_screen

    from loopdeck.operator.links import ReplayLink
    from loopdeck.tui.replay import ReplayScreen

    db, run_id = solved_run
    app = LoopdeckApp(ConsoleStart.for_link(ReplayLink(db, run_id)))
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_until(pilot, lambda: isinstance(run_screen(app), ReplayScreen))
        app.show_keys()
        await wait_until(pilot, lambda: isinstance(app.screen, KeysScreen))
        keys = app.screen
        assert isinstance(keys, KeysScreen)
        typed = [name for name, _, _ in keys.console]
        for name in ("q", "tab", "shift+tab", "ctrl+c", "ctrl+q", "ctrl+p"):
            assert typed.count(name) == 1, typed
        await wait_until(pilot, lambda: "pgdn home end scroll" in screen_text(app))
        listed = keys.query_one("#keys-list")
        assert listed.max_scroll_y > 0 and "ctrl+p     Commands" not in screen_text(app)
        while listed.scroll_y < listed.max_scroll_y:
            before = listed.scroll_y
            await pilot.press(key)
            await wait_until(pilot, lambda before=before: listed.scroll_y > before)
        await wait_until(pilot, lambda: "ctrl+p     Commands" in screen_text(app))


async def test_the_keys_of_the_message_box_name_ctrl_q_once() -> None:
    from loopdeck.tui.message_dialog import MessageDialog

    app = console_app(SAMPLES / "order_support", "solve")
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, ApprovalDialog))
        await pilot.press("escape")
        await wait_until(pilot, lambda: not isinstance(app.screen, ApprovalDialog))
        await pilot.press("m")
        await wait_until(pilot, lambda: isinstance(app.screen, MessageDialog))
        own, console, _ = keys_of(app.screen)
        typed = [name for name, _, _ in own + console]
        assert typed.count("ctrl+q") == 1 and typed.count("esc") == 1, typed
        assert not {"ctrl+a", "backspace", "left"} & set(typed)  # the box's editing keys
