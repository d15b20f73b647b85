"""The keys line keeps every key at 80 columns (README "The console"): words shortened to
one lowercase word, then the palette's key dropped, then the keys one space apart. Only a
run opened from the fleet with a grant and a write waiting has more than that holds: its `G`
gives way, which the Calls panel's border names (`· G`)."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

import pytest
from console_helpers import run_screen, screen_lines, start_from_fleet, wait_until
from test_console_refusals import DialogHost
from test_keys_in_view import stored_app
from textual.pilot import Pilot

from loopdeck.core.approvals import request_for
from loopdeck.tui.app import ConsoleStart, LoopdeckApp
from loopdeck.tui.dialogs import ApprovalDialog
from loopdeck.tui.keys_bar import KeysBar

BARE = re.compile(r"(^|\s)[a-z](\s+[a-z](\s|$))")  # a letter with no word after it
RUN_KEYS = ("w wait", "t log", "m msg", "G revoke", "f fork", "s stop", "k kill", "p pause")
DIALOG_KEYS = ("a approve", "e edit", "g grant", "r reject", "esc later", "s stop", "k kill")


def keys_line(app: Any) -> str:
    return screen_lines(app)[-1]


def has(line: str, words: str) -> bool:
    """`words` as one key of the line: not a piece of a longer word."""
    return re.search(rf"(^|\s){re.escape(words)}(\s|$)", line) is not None


async def granted_and_waiting(pilot: Pilot[Any], app: Any) -> None:
    """`g` then enter on the first write (a grant of these arguments): the next write waits,
    the grant live; esc to the run."""
    await wait_until(pilot, lambda: isinstance(app.screen, ApprovalDialog))
    dialog = app.screen
    await pilot.press("g")
    chooser = lambda: dialog.granting is not None and dialog.granting.scopes.has_focus  # noqa: E731
    await wait_until(pilot, chooser)
    await pilot.press("enter")
    await wait_until(pilot, lambda: isinstance(app.screen, ApprovalDialog) and app.screen != dialog)
    await pilot.press("escape")
    screen = run_screen(app)
    await wait_until(pilot, lambda: app.screen is screen and has(keys_line(app), "t log"))
    await pilot.pause()


async def test_a_run_with_a_grant_shows_every_key_at_80x24(tmp_path) -> None:
    app = stored_app("service_outage", "grant", tmp_path / "s.db")
    async with app.run_test(size=(80, 24)) as pilot:
        await granted_and_waiting(pilot, app)
        line = keys_line(app)
        for words in (*RUN_KEYS, "q quit", "i inbox"):
            assert has(line, words), line
        assert "more" not in line and not BARE.search(line), line


async def test_the_approval_dialog_shows_every_key_at_80x24(tmp_path) -> None:
    """`s`, `k`, `p` and `q` work over any dialog: the line says them with the dialog's."""
    app = stored_app("service_outage", "grant", tmp_path / "s.db")
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, ApprovalDialog))
        await pilot.pause()
        line = keys_line(app)
        for words in (*DIALOG_KEYS, "p pause", "q quit"):
            assert has(line, words), line
        assert "more" not in line and not BARE.search(line), line


async def test_from_the_fleet_the_grant_key_gives_way_to_the_rest(tmp_path) -> None:
    """Eleven keys at 80 columns: `G` gives way, named by the Calls panel's border; every
    other key stays, `q` and `i` included, no `more`."""
    app = LoopdeckApp(ConsoleStart.for_fleet(tmp_path / "s.db"))
    async with app.run_test(size=(80, 24)) as pilot:
        await start_from_fleet(pilot, app, "service_outage", "grant")
        await granted_and_waiting(pilot, app)
        line = keys_line(app)
        for words in ("w wait", "t log", "m msg", "esc fleet", "f fork", "s stop", "k kill"):
            assert has(line, words), line
        for words in ("p pause", "q quit", "i inbox"):
            assert has(line, words), line
        assert "G " not in line and "more" not in line, line
        assert "grant · G" in "\n".join(screen_lines(app))  # where `G` is said
        await pilot.resize_terminal(100, 30)  # room for it: back on the line
        await wait_until(pilot, lambda: has(keys_line(app), "G revoke"))


@pytest.mark.parametrize("not_editable", ["", "the agent runs its own input"])
async def test_the_approval_dialogs_foot_says_its_keys_in_the_keys_lines_order(
    not_editable: str,
) -> None:
    """Reject beside approve in both lines: the dialog's own foot and the keys line below."""
    request = request_for(
        run_id="r1", call_id="c1", tool="write_file", args={"path": "a.txt"}, state_hash="s1",
        fingerprint="f1", plan_step=None, ttl_s=300, not_editable=not_editable,
    )  # fmt: skip
    app = DialogHost()
    async with app.run_test(size=(160, 48)) as pilot:
        dialog = ApprovalDialog(request, 1, "write", lambda: datetime.now(UTC))
        app.push_screen(dialog)
        await wait_until(pilot, lambda: dialog.is_mounted)
        bar = dialog.query_one(KeysBar)
        await wait_until(pilot, lambda: bool(bar.key_spans))
        foot = str(dialog.query_one("#approval-keys").render())
        said = [part.split()[0] for part in foot.split("  ")]
        assert said == ["a", "r", "e", "g", "esc"], foot
        bar_keys = [key for _, _, key in bar.key_spans]
        assert [k for k in bar_keys if k in ("a", "r", "e", "g", "escape")] == [
            "a", "r", "e", "g", "escape"
        ]  # fmt: skip
        words = "reject and tell the agent" if not_editable else "edit"
        assert f"e {words}" in foot
