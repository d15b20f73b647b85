"""The console offers only what a run carries out (issue 36): `e` on a call that cannot run an
edit (`not_editable`: the agent runs its own input) opens the editor as what to tell the agent,
and `ctrl+o` makes a rejection whose reason is that instruction, never an approval with
arguments, in the run's approval dialog and in the inbox; the inbox takes only the answers a
question offers."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from console_helpers import console_app, finished, notices, run_screen, wait_until
from test_decision_refusals import WHY, Recorded, record
from test_markup_property import screen_text
from textual.app import App
from textual.widgets import Input, TextArea

import loopdeck.tui
from loopdeck.core.approvals import ApprovalDecision, request_for
from loopdeck.core.states import RunState
from loopdeck.store.opening import open_store
from loopdeck.tui.decision_dialogs import WriteDecisionDialog
from loopdeck.tui.dialogs import ApprovalDialog
from loopdeck.tui.inbox import InboxScreen
from loopdeck.tui.keys_bar import KeysBar
from loopdeck.tui.themes import APP_VARIABLES

DECISIONS = Path(__file__).parent / "envs" / "console_decisions"
SIZE = (160, 48)
TOLD = 'Run it with this input instead: {"path": "notes/a.txt", "text": "done"}'


class DialogHost(App[None]):
    """The console's stylesheet and variables, for one dialog."""

    CSS_PATH = str(Path(loopdeck.tui.__file__).parent / "loopdeck.tcss")

    def get_theme_variable_defaults(self) -> dict[str, str]:
        return dict(APP_VARIABLES)


def _request() -> Any:
    return request_for(
        run_id="r1", call_id="c1", tool="write_file",
        args={"path": "notes/a.txt", "text": "draft"}, state_hash="s1", fingerprint="f1",
        plan_step=None, ttl_s=300, not_editable=WHY,
    )  # fmt: skip


def _text(screen: Any, selector: str) -> str:
    return str(screen.query_one(selector).render())


async def _type(pilot: Any, editor: TextArea, text: str) -> None:
    editor.clear()
    editor.insert(text)
    await wait_until(pilot, lambda: editor.text == text)
    await pilot.pause()


async def test_e_in_the_approval_dialog_tells_the_agent_as_a_rejection() -> None:
    app = DialogHost()
    async with app.run_test(size=SIZE) as pilot:
        decided: list[ApprovalDecision | None] = []
        dialog = ApprovalDialog(_request(), 1, "write", lambda: datetime.now(UTC))
        app.push_screen(dialog, decided.append)
        await wait_until(pilot, lambda: app.screen is dialog and dialog.is_mounted)
        assert f"Not editable: {WHY}" in _text(dialog, "#approval-not-editable")
        keys = _text(dialog, "#approval-keys")
        assert "e reject and tell the agent" in keys and "e edit" not in keys
        assert dialog.check_action("tell", ()) and not dialog.check_action("edit", ())
        await pilot.press("e")
        await wait_until(pilot, lambda: isinstance(dialog.focused, TextArea))
        assert dialog.editing is not None and dialog.mode == "tell"
        assert "tell the agent" in str(dialog.editing.editor.border_title)
        assert not dialog.check_action("approve_edited", ())
        assert "ctrl+o reject, telling the agent" in _text(dialog, "#approval-keys")
        await pilot.press("ctrl+o")  # as proposed: nothing to tell, nothing decided
        await pilot.pause()
        assert app.screen is dialog and "no change" in str(dialog.editing.verdict.render())
        await _type(pilot, dialog.editing.editor, '{"path": "notes/a.txt", "text": "done"}')
        assert "the agent is told to run it with" in str(dialog.editing.verdict.render())
        await pilot.press("ctrl+o")
        await wait_until(pilot, lambda: bool(decided))
        [told] = decided
        assert told is not None and (told.approved, told.args) == (False, None)
        assert told.reason.startswith(TOLD) and WHY in told.reason
        # `a` still approves it as proposed: what the call can carry out
        again = ApprovalDialog(_request(), 1, "write", lambda: datetime.now(UTC))
        app.push_screen(again, decided.append)
        await wait_until(pilot, lambda: app.screen is again)
        await pilot.press("a")
        await wait_until(pilot, lambda: len(decided) == 2)
        assert decided[1] is not None and (decided[1].approved, decided[1].args) == (True, None)


async def test_the_run_records_what_the_agent_is_told_as_the_consoles_rejection() -> None:
    app = console_app(DECISIONS, "edit")
    tools = app.session.runtime.tools
    tools["write_file"] = tools["write_file"].model_copy(update={"not_editable": WHY})
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, ApprovalDialog))
        dialog = app.screen
        assert isinstance(dialog, ApprovalDialog) and dialog.request.not_editable == WHY
        await wait_until(pilot, lambda: dialog.is_mounted)
        assert WHY in _text(dialog, "#approval-not-editable")
        await pilot.press("e")
        await wait_until(pilot, lambda: isinstance(dialog.focused, TextArea))
        assert dialog.editing is not None and dialog.mode == "tell"
        await _type(pilot, dialog.editing.editor, '{"path": "notes/a.txt", "text": "done"}')
        await pilot.press("ctrl+o")
        await wait_until(pilot, lambda: finished(app))
        screen = run_screen(app)
        assert screen is not None
        entries = [(e.title, e.text) for e in screen.transcript.entries]
    assert screen.runtime.env.files == {}  # nothing ran, edited or not
    [said] = [text for title, text in entries if title.startswith("rejected · c1 · by console")]
    assert f"\nreason: {TOLD}" in said
    assert not [t for t, _ in entries if t.startswith("approved")]


async def _inbox(pilot: Any, app: App[Any], db: Path, count: int) -> InboxScreen:
    inbox = InboxScreen(db, lambda: datetime.now(UTC))
    await app.push_screen(inbox)
    # its entries read, and the first of them under the cursor (what the keys act on)
    await wait_until(pilot, lambda: len(inbox.entries) == count and inbox.selected() is not None)
    return inbox


async def test_e_in_the_inbox_tells_the_agent_as_a_rejection(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    store = await open_store(db)
    try:
        await record(
            store, Recorded("r1").started(RunState.AWAITING_APPROVAL).write("c1", not_editable=WHY)
        )
        app = DialogHost()
        async with app.run_test(size=SIZE, notifications=True) as pilot:
            inbox = await _inbox(pilot, app, db, 1)
            assert inbox.check_action("edit", ("tell",))
            assert not inbox.check_action("edit", ("edit",)) and inbox.check_action(
                "edit", ("grant",)
            )
            await wait_until(
                pilot, lambda: "Tell the agent" in str(inbox.query_one(KeysBar).render())
            )
            await pilot.press("e")
            await wait_until(pilot, lambda: isinstance(app.screen, WriteDecisionDialog))
            dialog = app.screen
            assert isinstance(dialog, WriteDecisionDialog) and dialog.editing is not None
            await wait_until(pilot, lambda: "Reject and tell the agent · c1" in screen_text(app))
            assert f"Not editable: {WHY}" in _text(dialog, "#write-not-editable")
            assert "ctrl+o reject, telling the agent" in _text(dialog, "#write-keys")
            await _type(pilot, dialog.editing.editor, '{"path": "b.txt"}')
            await pilot.press("ctrl+o")
            await wait_until(pilot, lambda: app.screen is inbox and not inbox.entries)
        rows = await store.fetchall("SELECT state, decided_by, reason, edited_args FROM approvals")
    finally:
        await store.close()
    [(state, by, reason, edited)] = [tuple(row) for row in rows]
    assert (state, by, edited) == ("rejected", "console inbox", None)
    assert reason.startswith('Run it with this input instead: {"path": "b.txt"}')


async def test_the_inbox_takes_only_an_answer_the_question_offers(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    store = await open_store(db)
    try:
        asks = Recorded("r1").started(RunState.AWAITING_ANSWER).question("q1", ["stop", "nudge"])
        await record(store, asks)
        app = DialogHost()
        async with app.run_test(size=SIZE, notifications=True) as pilot:
            inbox = await _inbox(pilot, app, db, 1)
            await pilot.press("a")
            box = inbox.query_one("#inbox-reason", Input)
            await wait_until(pilot, lambda: box.has_focus)
            assert "one of: stop, nudge TEXT" in box.placeholder
            await pilot.press(*"allow", "enter")
            await wait_until(pilot, lambda: any("it offers only" in said for said in notices(app)))
            assert box.display and box.value == "allow"  # kept, to be put right
            found = await store.fetchall("SELECT state FROM approvals")
            assert [row["state"] for row in found] == ["pending"]
            box.value = ""
            await pilot.press(*"stop", "enter")
            await wait_until(pilot, lambda: not inbox.entries)
        rows = await store.fetchall("SELECT state, reason FROM approvals")
    finally:
        await store.close()
    assert [tuple(row) for row in rows] == [("answered", "stop")]


async def test_a_reason_typed_in_the_inbox_goes_to_the_write_it_was_typed_for(
    tmp_path: Path,
) -> None:
    """The write the box was opened for is decided elsewhere while the reason is typed: enter
    rejects no other write (it rejected whichever the cursor had moved to); it is told."""
    from loopdeck.store import deciding

    db = tmp_path / "s.db"
    store = await open_store(db)
    try:
        for run_id in ("r1", "r2"):
            await record(store, Recorded(run_id).started(RunState.AWAITING_APPROVAL).write("c1"))
        app = DialogHost()
        async with app.run_test(size=SIZE, notifications=True) as pilot:
            inbox = await _inbox(pilot, app, db, 2)
            typed_for = inbox.selected()
            assert typed_for is not None
            other = next(e.run_id for e in inbox.entries if e.run_id != typed_for.run_id)
            await pilot.press("r")
            box = inbox.query_one("#inbox-reason", Input)
            await wait_until(pilot, lambda: box.has_focus)
            await pilot.press(*"not this one")
            approved = ApprovalDecision(call_id="c1", approved=True, by="cli")
            assert await deciding.decide(store, typed_for.run_id, approved)
            await wait_until(pilot, lambda: len(inbox.entries) == 1)
            await pilot.press("enter")
            await wait_until(pilot, lambda: any("already decided" in said for said in notices(app)))
        rows = await store.fetchall("SELECT run_id, state, reason FROM approvals ORDER BY run_id")
    finally:
        await store.close()
    found = {row["run_id"]: (row["state"], row["reason"]) for row in rows}
    assert found[other] == ("pending", None)
    assert found[typed_for.run_id][0] == "approved"
