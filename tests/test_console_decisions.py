"""Decisions beyond yes and no, in the console: a write's arguments edited then approved (`e`,
`ctrl+o`; what does not pass is said and never sent), approved with a standing grant (`g`),
a grant revoked (`G`), a write whose outcome is unknown resolved (`o`), and the inbox's
unknown outcomes, edits and grants decided through the store; hostile text never drawn raw."""

from __future__ import annotations

import json
import os
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from console_helpers import (
    console_app,
    finished,
    grant_any_arguments,
    notices,
    run_screen,
    wait_until,
)
from test_markup_property import raw_controls, screen_text
from textual import events
from textual.app import App
from textual.widgets import TextArea

from loopdeck.core.events import CallStatus
from loopdeck.core.states import StopReason
from loopdeck.operator.inbox import BY as INBOX_BY
from loopdeck.operator.inbox import PendingOutcome, PendingWrite
from loopdeck.store.base import Store
from loopdeck.store.liveness import process_started, this_host
from loopdeck.store.opening import open_store
from loopdeck.tui.decision_dialogs import GrantPicker, OutcomeDialog, WriteDecisionDialog
from loopdeck.tui.dialogs import ApprovalDialog, ConfirmDialog
from loopdeck.tui.grants_panel import GrantsPanel
from loopdeck.tui.inbox import InboxScreen
from loopdeck.tui.keys_screen import KeysScreen

DECISIONS = Path(__file__).parent / "envs" / "console_decisions"
SIZE = (160, 48)
HOSTILE = "\x1b[2J\x00\x07\u202eevil\u2066x\u2069 [b]bold[/] [0 "


def _toasts(app: App[Any]) -> list[str]:
    return notices(app)


def _entries(screen: Any, start: str) -> list[str]:
    return [e.text for e in screen.transcript.entries if e.title.startswith(start)]


async def _dialog(pilot: Any, app: App[Any], call_id: str) -> ApprovalDialog:
    await wait_until(
        pilot,
        lambda: isinstance(app.screen, ApprovalDialog) and app.screen.request.call_id == call_id,
    )
    assert isinstance(app.screen, ApprovalDialog)
    return app.screen


async def _edit(pilot: Any, dialog: ApprovalDialog, text: str) -> None:
    """The box holds `text`, as a paste would leave it."""
    assert dialog.editing is not None
    editor = dialog.editing.editor
    editor.clear()
    editor.insert(text)
    await wait_until(pilot, lambda: dialog.editing is not None and editor.text == text)
    await pilot.pause()


def _verdict(dialog: ApprovalDialog) -> str:
    assert dialog.editing is not None
    return str(dialog.editing.verdict.render())


# -- e: edit, then approve -------------------------------------------------------------------
async def test_an_edit_runs_the_tool_with_the_edited_arguments_and_bad_json_decides_nothing() -> (
    None
):
    app = console_app(DECISIONS, "edit")
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        dialog = await _dialog(pilot, app, "c1")
        screen = run_screen(app)
        await pilot.press("e")
        await wait_until(pilot, lambda: isinstance(dialog.focused, TextArea))
        assert json.loads(dialog.editing.editor.text) == {"path": "notes/a.txt", "text": "draft"}
        assert "no change" in _verdict(dialog)
        # not JSON: said under the box, and ctrl+o sends nothing
        await _edit(pilot, dialog, '{"path": "notes/a.txt", "text": ')
        assert "not valid: not JSON" in _verdict(dialog)
        await pilot.press("ctrl+o")
        await pilot.pause()
        assert app.screen is dialog and [p.call_id for p in screen.link.pending()] == ["c1"]
        # JSON the tool's schema refuses: said, not sent
        await _edit(pilot, dialog, '{"path": "notes/a.txt", "text": "x", "mode": "w"}')
        assert "not valid" in _verdict(dialog) and "mode" in _verdict(dialog)
        await pilot.press("ctrl+o")
        await pilot.pause()
        assert app.screen is dialog
        # typed letters go into the box: s, k, p, q, a, r are not the run's keys here
        await _edit(pilot, dialog, '{"path": "notes/a.txt", "text": "d"}')
        dialog.editing.editor.move_cursor((0, len('{"path": "notes/a.txt", "text": "d')))
        await pilot.press(*"skpqar")
        await wait_until(pilot, lambda: '"dskpqar"' in _verdict(dialog))
        assert screen.running and app.screen is dialog
        await _edit(pilot, dialog, '{"path": "notes/a.txt", "text": "done"}')
        assert 'text: "draft" → "done"' in _verdict(dialog)
        await pilot.press("ctrl+o")
        await wait_until(pilot, lambda: finished(app))
        assert screen.outcome.stop_reason is StopReason.GOAL_MET
        assert screen.runtime.env.files == {"notes/a.txt": "done"}
        [approved] = _entries(screen, "approved (edited) · c1 · by console")
        assert 'text: "draft" → "done"' in approved
        assert screen.view.calls["c1"].args == {"path": "notes/a.txt", "text": "done"}


async def test_esc_leaves_the_editor_unsent_and_hostile_text_in_it_is_never_drawn_raw() -> None:
    app = console_app(DECISIONS, "edit")
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        dialog = await _dialog(pilot, app, "c1")
        screen = run_screen(app)
        await pilot.press("e")
        await wait_until(pilot, lambda: isinstance(dialog.focused, TextArea))
        await _edit(pilot, dialog, json.dumps({"path": "a", "text": HOSTILE}, ensure_ascii=False))
        await _edit(pilot, dialog, dialog.editing.editor.text + "\n" + HOSTILE)  # raw, outside
        assert app.is_running and raw_controls(screen_text(app)) == []
        assert "not valid" in _verdict(dialog)
        # a 1 MB paste: refused by name, the screen still drawn (its line scrolls sideways)
        editor = dialog.editing.editor
        editor.clear()
        editor.post_message(events.Paste('{"text": "' + "A" * 1_000_100 + '"}'))
        await wait_until(pilot, lambda: "at most 1,000,000" in _verdict(dialog))
        assert not editor.soft_wrap
        await pilot.press("x")  # a key still answers at once
        await wait_until(pilot, lambda: editor.text.startswith('{"text": "AAA'))
        await pilot.press("ctrl+o")
        await pilot.pause()
        assert app.screen is dialog and raw_controls(screen_text(app)) == []
        await pilot.press("escape")  # back to the dialog's keys, nothing decided
        await wait_until(pilot, lambda: dialog.mode == "" and not dialog.editing.display)
        assert app.screen is dialog and [p.call_id for p in screen.link.pending()] == ["c1"]
        await pilot.press("e")  # opened again: the proposal's arguments, as proposed
        await wait_until(pilot, lambda: "no change" in _verdict(dialog))
        await pilot.press("escape", "a")
        await wait_until(pilot, lambda: finished(app))
        assert screen.runtime.env.files == {"notes/a.txt": "draft"}
        assert _entries(screen, "approved · c1 · by console")


# -- g: approve and grant; G: revoke --------------------------------------------------------
async def test_a_grant_for_two_uses_approves_the_next_two_writes_and_then_asks_again() -> None:
    app = console_app(DECISIONS, "grant")
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        dialog = await _dialog(pilot, app, "c1")
        screen = run_screen(app)
        assert not screen.query_one(GrantsPanel).display  # no grant yet: no panel
        await pilot.press("g")
        await wait_until(pilot, lambda: dialog.granting is not None and dialog.mode == "grant")
        chooser = dialog.granting
        await wait_until(pilot, lambda: chooser.scopes.has_focus)
        assert chooser.fields.value == "path=notes/*"  # suggested from the path's folder
        # a grant that cannot be read is said and never sent
        await pilot.press("down", "down", "tab", "ctrl+u", *"nope=x")
        await wait_until(pilot, lambda: "nope is not an argument" in str(chooser.said.render()))
        await pilot.press("enter")
        await pilot.pause()
        assert app.screen is dialog and screen.link.pending()
        # tool scope (any arguments), 2 uses
        chooser.scopes.focus()
        await pilot.press("up", "tab", "tab", "2")
        await wait_until(pilot, lambda: "any arguments, 2 uses" in str(chooser.said.render()))
        await pilot.press("enter")
        await _dialog(pilot, app, "c4")  # c2 and c3 ran without asking
        [grant] = screen.view.grants.of_run(screen.view.run_id)
        assert (grant.grant_id, grant.used, grant.state()) == ("g1", ["c2", "c3"], "used up")
        assert screen.runtime.env.files["notes/c.txt"] == "three"
        assert screen.view.decided["c2"].startswith("approved by grant g1, granted by console")
        assert _entries(screen, "granted g1: write_file, any arguments, 2 uses, by console")
        panel = screen.query_one(GrantsPanel)
        assert panel.display and "g1" in panel._painted and "used up" in panel._painted
        await pilot.press("a")
        await wait_until(pilot, lambda: finished(app))
        assert screen.outcome.stop_reason is StopReason.GOAL_MET


async def test_G_revokes_the_grant_and_the_next_write_is_asked() -> None:
    app = console_app(DECISIONS, "revoke")
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        dialog = await _dialog(pilot, app, "c1")
        screen = run_screen(app)
        await grant_any_arguments(pilot, dialog)
        await wait_until(pilot, lambda: screen.view.tool_running == "hold" and app.screen is screen)
        await wait_until(pilot, lambda: screen.query_one(GrantsPanel).display)
        await pilot.press("G")
        await wait_until(pilot, lambda: isinstance(app.screen, ConfirmDialog))
        await pilot.press("y")
        [grant] = screen.view.grants.of_run(screen.view.run_id)
        await wait_until(pilot, lambda: grant.revoked_by == "console")
        await wait_until(pilot, lambda: any("g1 revoked" in t for t in _toasts(app)))
        assert _entries(screen, "grant revoked · g1 · by console")
        screen.runtime.env.let_go()
        await _dialog(pilot, app, "c3")  # no grant covers it any more: asked
        await pilot.press("a")
        await wait_until(pilot, lambda: finished(app))
        assert screen.outcome.stop_reason is StopReason.GOAL_MET
        hold = screen.view.calls["c2"].result
        assert hold is not None and hold["data"] == {"released": True}  # let go, not timed out


@pytest.mark.slow  # seconds: `make stress` runs it (CI too)
async def test_G_with_several_grants_offers_a_chooser() -> None:
    app = console_app(DECISIONS, "revoke")
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await _dialog(pilot, app, "c1")
        screen = run_screen(app)
        runtime = screen.runtime
        await pilot.press("g", "down", "enter")
        await wait_until(pilot, lambda: screen.view.tool_running == "hold" and app.screen is screen)
        from loopdeck.core.grant_rules import GrantRule

        runtime.calls.approvals.grants.give("c1", "write_file", GrantRule.parse("exact"), {}, "x")
        await wait_until(pilot, lambda: len(screen.view.grants.of_run(screen.view.run_id)) == 2)
        await pilot.press("G")
        await wait_until(pilot, lambda: isinstance(app.screen, GrantPicker))
        await pilot.press("down", "enter")
        await wait_until(pilot, lambda: any("g2 revoked" in t for t in _toasts(app)))
        assert [g.state() for g in screen.view.grants.of_run(screen.view.run_id)] == [
            "active",
            "revoked by console",
        ]
        await pilot.press("k", "y")
        await wait_until(pilot, lambda: finished(app))


# -- o: a write whose outcome is unknown -----------------------------------------------------
async def test_o_says_an_unknown_outcome_took_effect() -> None:
    app = console_app(DECISIONS, "unknown")
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await _dialog(pilot, app, "c1")
        screen = run_screen(app)
        assert not screen.check_action("outcome", ())  # nothing unknown yet: no `o`
        await pilot.press("a")
        await wait_until(pilot, lambda: screen.view.tool_running == "hold" and app.screen is screen)
        assert screen.view.unknown == {"c1": "flaky_write"}
        assert screen.view.calls["c1"].status is CallStatus.OUTCOME_UNKNOWN
        assert "1 outcome unknown · o" in str(screen.query_one("#calls").border_title)
        await pilot.press("o")
        await wait_until(pilot, lambda: isinstance(app.screen, OutcomeDialog))
        assert app.screen.call_id == "c1" and "flaky_write(text='perhaps')" in screen_text(app)
        await pilot.press("escape")  # later: nothing said
        await wait_until(pilot, lambda: app.screen is screen)
        assert screen.view.unknown == {"c1": "flaky_write"}
        await pilot.press("o", "y")
        await wait_until(pilot, lambda: not screen.view.unknown)
        assert screen.view.calls["c1"].status is CallStatus.EXECUTED
        assert screen.view.decided["c1"].split("; ")[-1].startswith("applied by console")
        await wait_until(pilot, lambda: any("c1: applied, recorded" in t for t in _toasts(app)))
        [entry] = _entries(screen, "outcome resolved · c1 · flaky_write · applied · by console")
        assert "recorded as executed" in entry
        await wait_until(pilot, lambda: not screen.check_action("outcome", ()))
        screen.runtime.env.let_go()
        await wait_until(pilot, lambda: finished(app))
        hold = screen.view.calls["c2"].result
        assert hold is not None and hold["data"] == {"released": True}  # let go, not timed out
        # said to the model before its next turn, as the operator's words
        assert any("took effect" in said for said in screen.runtime.messages.heard)


# -- the inbox: unknown outcomes, edits and grants through the store -------------------------
NOW = datetime.now(UTC)
SCHEMA = {
    "type": "object",
    "properties": {"path": {"type": "string"}, "text": {"type": "string"}},
    "required": ["path", "text"],
    "additionalProperties": False,
}


async def _stored_run(store: Store, run_id: str, state: str) -> None:
    """A run of this process (alive) in `state`."""
    pid = os.getpid()
    await store.execute(
        "INSERT INTO runs (run_id, env, script, state, started_at, pid, host, pid_started,"
        " heartbeat_at) VALUES (?, 'decisions', 's', ?, ?, ?, ?, ?, ?)",
        (run_id, state, NOW.isoformat(), pid, this_host(), process_started(pid), time.time()),
    )


async def _stored_write(store: Store, run_id: str, call_id: str, state: str, outcome: str) -> None:
    """Asked now, not when the module was read: `make stress` runs this many minutes after
    collecting it, and the store refuses a decision on an asking that has expired."""
    args = {"path": "notes/a.txt", "text": HOSTILE}
    asked = datetime.now(UTC)
    await store.execute(
        "INSERT INTO approvals (run_id, call_id, tool, args, requested_at, expires_at, state,"
        " outcome) VALUES (?, ?, 'write_file', ?, ?, ?, ?, ?)",
        (run_id, call_id, json.dumps(args), asked.isoformat(),
         (asked + timedelta(seconds=300)).isoformat(), state, outcome or None),
    )  # fmt: skip
    body = {"call_id": call_id, "tool": "write_file", "args": args, "args_schema": SCHEMA}
    await store.execute(
        "INSERT INTO events (run_id, seq, kind, at, body) SELECT ?, COALESCE(MAX(seq), 0) + 1,"
        " 'approval_requested', ?, ? FROM events WHERE run_id = ?",
        (run_id, asked.isoformat(), json.dumps(body), run_id),
    )


async def _inbox(pilot: Any, app: App[Any], db: Path, count: int) -> InboxScreen:
    inbox = InboxScreen(db, lambda: datetime.now(UTC))
    await app.push_screen(inbox)
    await wait_until(pilot, lambda: len(inbox.entries) == count)
    return inbox


async def test_the_inbox_resolves_an_unknown_outcome_of_an_ended_run(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    store = await open_store(db)
    try:
        await _stored_run(store, "r1", "stopped")
        await _stored_write(store, "r1", "c1", "approved", "outcome_unknown")
        app = App[None]()
        async with app.run_test(size=SIZE, notifications=True) as pilot:
            inbox = await _inbox(pilot, app, db, 1)
            [entry] = inbox.entries
            assert isinstance(entry, PendingOutcome) and not entry.live
            assert raw_controls(screen_text(app)) == []  # its hostile arguments, escaped
            assert "outcome?" in screen_text(app) and "unknown outcome" in screen_text(app)
            assert not inbox.check_action("approve", ()) and not inbox.check_action("message", ())
            await pilot.press("o")
            await wait_until(pilot, lambda: isinstance(app.screen, OutcomeDialog))
            assert raw_controls(screen_text(app)) == []
            await pilot.press("n")
            await wait_until(pilot, lambda: app.screen is inbox and not inbox.entries)
        rows = await store.fetchall("SELECT outcome FROM approvals WHERE call_id = 'c1'")
        assert [row["outcome"] for row in rows] == ["failed"]
        events = await store.fetchall("SELECT body FROM events WHERE kind = 'outcome_resolved'")
        [said] = [json.loads(row["body"]) for row in events]
        assert (said["call_id"], said["applied"], said["by"]) == ("c1", False, INBOX_BY)
    finally:
        await store.close()


@pytest.mark.slow  # seconds: `make stress` runs it (CI too)
async def test_the_inbox_edits_and_grants_a_write_through_the_store(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    store = await open_store(db)
    try:
        await _stored_run(store, "r1", "awaiting_approval")
        await _stored_write(store, "r1", "c1", "pending", "")
        await _stored_write(store, "r1", "c2", "pending", "")
        app = App[None]()
        async with app.run_test(size=SIZE, notifications=True) as pilot:
            inbox = await _inbox(pilot, app, db, 2)
            first = inbox.selected()
            assert isinstance(first, PendingWrite) and first.args_schema == SCHEMA
            await pilot.press("e")
            await wait_until(pilot, lambda: isinstance(app.screen, WriteDecisionDialog))
            dialog = app.screen
            await wait_until(pilot, lambda: isinstance(dialog.focused, TextArea))
            assert raw_controls(screen_text(app)) == []  # the proposal, escaped in the box
            editor = dialog.editing.editor
            editor.clear()
            editor.insert('{"path": "notes/a.txt"}')
            await wait_until(
                pilot, lambda: "'text' is a required" in str(dialog.editing.verdict.render())
            )
            await pilot.press("ctrl+o")
            await pilot.pause()
            assert app.screen is dialog  # not sent
            editor.clear()
            editor.insert('{"path": "notes/a.txt", "text": "done"}')
            await pilot.press("ctrl+o")
            await wait_until(pilot, lambda: len(inbox.entries) == 1 and app.screen is inbox)
            await pilot.press("g")
            await wait_until(pilot, lambda: isinstance(app.screen, WriteDecisionDialog))
            await pilot.press("enter")  # exactly these arguments
            await wait_until(pilot, lambda: not inbox.entries and app.screen is inbox)
        rows = await store.fetchall(
            "SELECT call_id, state, decided_by, edited_args, grant_rule FROM approvals"
            " ORDER BY call_id"
        )
        got = [(r["call_id"], r["state"], r["decided_by"]) for r in rows]
        assert got == [("c1", "approved", INBOX_BY), ("c2", "approved", INBOX_BY)]
        assert json.loads(rows[0]["edited_args"]) == {"path": "notes/a.txt", "text": "done"}
        assert json.loads(rows[1]["grant_rule"])["scope"] == "exact"
    finally:
        await store.close()


@pytest.mark.slow  # seconds: `make stress` runs it (CI too)
async def test_m_in_the_inbox_messages_the_entrys_run(tmp_path: Path) -> None:
    from loopdeck.tui.message_dialog import MessageDialog

    db = tmp_path / "s.db"
    store = await open_store(db)
    try:
        await _stored_run(store, "r1", "awaiting_approval")
        await _stored_write(store, "r1", "c1", "pending", "")
        app = App[None]()
        async with app.run_test(size=SIZE, notifications=True) as pilot:
            await _inbox(pilot, app, db, 1)
            await pilot.press("m")
            await wait_until(pilot, lambda: isinstance(app.screen, MessageDialog))
            await pilot.press(*"use the new path", "enter")
            await wait_until(
                pilot, lambda: any("message sent to run r1" in t for t in _toasts(app))
            )
        rows = await store.fetchall('SELECT run_id, command, "by" FROM commands')
        assert [(r["run_id"], r["command"], r["by"]) for r in rows] == [
            ("r1", 'message "use the new path"', INBOX_BY)
        ]
    finally:
        await store.close()


# -- without a screen: the chooser's words, the transcript's entries, the inbox's entries ----
def test_the_grant_chooser_suggests_a_folder_and_reads_uses_and_times() -> None:
    from loopdeck.tui.grant_chooser import seconds_of, suggested_fields, uses_of

    assert suggested_fields({"n": 3, "path": "src/app/main.py"}) == "path=src/app/*"
    assert suggested_fields({"order_id": "ORD-1042"}) == "order_id=ORD-1042"
    assert suggested_fields({"q": "a*b?[c]"}) == "q=a[*]b[?][[]c]"  # matches only itself
    assert suggested_fields({"addr": "7 New St, Springfield", "path": "../etc/x"}) == ""
    assert suggested_fields({"text": HOSTILE}) == ""
    assert [seconds_of(t) for t in ("", "90", "90s", "10m", "1.5h")] == [None, 90, 90, 600, 5400]
    assert [uses_of(t) for t in ("", "2")] == [None, 2]
    for bad in ("0", "-1", "two"):
        try:
            uses_of(bad)
        except ValueError as exc:
            assert "whole number" in str(exc)
        else:
            raise AssertionError(f"uses {bad!r} was read")
    for bad in ("soon", "0", "10 days"):
        try:
            seconds_of(bad)
        except ValueError as exc:
            assert "90s, 10m or 1h" in str(exc)
        else:
            raise AssertionError(f"for {bad!r} was read")


def test_the_transcript_says_grants_edits_and_outcomes_escaped() -> None:
    from loopdeck.core.events import ApprovalDecided, GrantGiven, GrantRevoked, OutcomeResolved
    from loopdeck.operator.transcript import Transcript

    transcript = Transcript()
    common = {"run_id": "r", "at": NOW}
    made = [
        GrantGiven(seq=1, grant_id="g1", call_id="c1", tool="update_delivery_address",
                   scope="tool", uses=2, by=HOSTILE, **common),
        ApprovalDecided(seq=2, call_id="c2", approved=True, reason="", grant_id="g1",
                        by="grant g1, granted by console", **common),
        ApprovalDecided(seq=3, call_id="c3", approved=True, reason="", by="console",
                        args={"a": 2}, changes=["a: 1 → 2"], **common),
        GrantRevoked(seq=4, grant_id="g1", by="console", **common),
        OutcomeResolved(seq=5, call_id="c4", tool="w", applied=False, by="console", **common),
    ]  # fmt: skip
    texts = [transcript.apply(event).text for event in made]
    assert texts[0].startswith("granted g1: update_delivery_address, any arguments, 2 uses, by ")
    assert raw_controls("\n".join(texts)) == []
    assert "by grant g1, granted by console" in texts[1] and "standing grant g1" in texts[1]
    assert texts[2].startswith("approved (edited) · c3") and "a: 1 → 2" in texts[2]
    assert texts[3].startswith("grant revoked · g1 · by console")
    assert texts[4].startswith("outcome resolved · c4 · w · not applied · by console")
    assert "may propose it again" in texts[4]


async def test_the_inbox_lists_unknown_outcomes_after_writes_and_questions(tmp_path: Path) -> None:
    from loopdeck.operator.inbox import read_entries

    store = await open_store(tmp_path / "s.db")
    try:
        await _stored_run(store, "live", "executing")
        await _stored_run(store, "ended", "stopped")
        await _stored_write(store, "ended", "c9", "approved", "")  # never recorded as ended
        await _stored_write(store, "live", "c1", "approved", "outcome_unknown")
        await _stored_write(store, "live", "c2", "approved", "")  # running now: not listed
        await _stored_write(store, "live", "c3", "pending", "")
        write, *outcomes = await read_entries(store)
        assert isinstance(write, PendingWrite) and write.key == "live/c3"
        assert all(isinstance(e, PendingOutcome) for e in outcomes)
        assert sorted((e.key, e.live) for e in outcomes) == [("ended/c9", False), ("live/c1", True)]
    finally:
        await store.close()


# -- a write asked while another screen is on top ---------------------------------------------
def asked(screen: Any, call_id: str) -> bool:
    row = screen.view.calls.get(call_id)
    waiting = any(p.call_id == call_id for p in screen.link.pending())
    return waiting and row is not None and row.status is CallStatus.PENDING_APPROVAL


async def test_a_write_asked_under_another_screen_is_offered_as_that_screen_goes() -> None:
    """The keys screen is open as the run asks for a write: nothing else happens while the run
    waits, and closing the keys screen offers the write's dialog."""
    app = console_app(DECISIONS, "held-write")
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(
            pilot, lambda: (s := run_screen(app)) is not None and s.view.tool_running == "hold"
        )
        screen = run_screen(app)
        assert screen is not None
        app.show_keys()
        await wait_until(pilot, lambda: isinstance(app.screen, KeysScreen))
        screen.runtime.env.let_go()
        await wait_until(pilot, lambda: asked(screen, "c2"))  # asked, and drawn
        await pilot.pause()
        assert isinstance(app.screen, KeysScreen)  # not offered over the keys
        await pilot.press("escape")
        await _dialog(pilot, app, "c2")
        await pilot.press("a")
        await wait_until(pilot, lambda: finished(app))
        assert screen.outcome.stop_reason is StopReason.GOAL_MET
