"""One approvals inbox across every run in the store: `i` from anywhere. `a` / `r` decide a
write (`e` edits its arguments first, or, on a call that cannot run an edit, tells the agent
what to run instead as a rejection; `g` approves it with a standing grant), `a` answers a
question (one of its choices, when it offers them), `o` says whether a write whose outcome is
unknown took effect, `m` messages the selected entry's run."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import TYPE_CHECKING

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.message import Message
from textual.screen import Screen
from textual.widgets import DataTable, Input, Static
from textual.worker import Worker

from loopdeck.core.text import plural, visible
from loopdeck.core.timeouts import bounded
from loopdeck.operator.inbox import (
    BY,
    Inbox,
    InboxEntry,
    PendingOutcome,
    PendingQuestion,
    PendingWrite,
    Tell,
)
from loopdeck.operator.records import StoreError, answer_forms
from loopdeck.tui.failures import worker_failed
from loopdeck.tui.inbox_detail import described
from loopdeck.tui.inbox_table import Layout, entry_cells, expiry, layout
from loopdeck.tui.keys_bar import KeysBar
from loopdeck.tui.panels import title
from loopdeck.tui.shown import NOT_TAKEN, toast
from loopdeck.tui.shown_input import ShownInput, typing_into
from loopdeck.tui.timers import every, unless_gone

if TYPE_CHECKING:
    from loopdeck.core.approvals import ApprovalDecision
    from loopdeck.operator.records import Location

Record = Callable[[Tell], Awaitable[str | None]]  # one decision to the store: None, or why not


class InboxChanged(Message):
    def can_replace(self, message: Message) -> bool:
        return isinstance(message, InboxChanged)


class InboxScreen(Screen[None]):
    """Every pending write, soonest to expire first, then the questions, then the unknown
    outcomes. A decision goes through the store's atomic update (one winner); the inbox stays
    open with the next entry selected."""

    BINDINGS = [
        Binding("a", "approve", "Approve/answer", id="inbox.approve"),
        Binding("r", "reject", "Reject…", id="inbox.reject"),  # beside approve, as the dialog
        Binding("e", "edit('edit')", "Edit…", id="inbox.edit"),
        Binding("e", "edit('tell')", "Tell the agent…", id="inbox.tell"),
        Binding("g", "edit('grant')", "Grant…", id="inbox.grant"),
        Binding("o", "outcome", "Outcome?", id="inbox.outcome"),
        Binding("m", "message", "Message", id="inbox.message"),
        # While the answer or reason box is open, the key line says what enter does.
        Binding("enter", "send('answer')", "Send answer", key_display="enter", priority=True,
                id="inbox.send_answer"),
        Binding("enter", "send('reject')", "Reject", key_display="enter", priority=True,
                id="inbox.send_reject"),
        Binding("escape", "close", "Back", id="inbox.close"),
    ]  # fmt: skip

    def __init__(self, db_path: Location | None, now: Callable[[], datetime]) -> None:
        super().__init__()
        self.db_path = db_path
        self.now = now
        self.inbox = Inbox()
        # Decisions on their way to the store, by call key: shown in place of the countdown.
        self._deciding: dict[str, str] = {}
        self._stop_following = asyncio.Event()
        self._store_closed = asyncio.Event()
        self._store_closed.set()  # none open until `follow` runs: a quit before waits for none
        # The entry the open box was opened for: what is typed goes to it, wherever the
        # cursor is when enter is pressed (the list moves as others decide).
        self._typing_for: InboxEntry | None = None
        self._layout: Layout | None = None  # the list's columns as last laid out

    def compose(self) -> ComposeResult:
        yield Static(id="inbox-header")
        yield DataTable(id="inbox-table", cursor_type="row", zebra_stripes=True, classes="panel")
        with VerticalScroll(id="inbox-detail", classes="panel"):
            yield Static(id="inbox-body")
        yield ShownInput(
            placeholder="reason for the model (optional), enter rejects", id="inbox-reason"
        )
        yield KeysBar()

    def on_mount(self) -> None:
        unless_gone(self, self._mounted)  # quitting as it is pushed: its widgets may be gone

    def _mounted(self) -> None:
        self.query_one("#inbox-reason").display = False
        table = self.query_one("#inbox-table", DataTable)
        table.border_title = "Waiting for you"  # writes, questions, unknown outcomes
        title(self.query_one("#inbox-detail"), "Selected write")
        every(self, 1.0, self._tick)
        self.follow()

    @work(group="inbox", exclusive=True, exit_on_error=False, description="pending approvals")
    async def follow(self) -> None:
        self._store_closed.clear()
        try:
            await self.inbox.follow(
                self.db_path, self._stop_following, lambda: self.post_message(InboxChanged())
            )
        finally:
            self._store_closed.set()

    @property
    def entries(self) -> list[InboxEntry]:
        """What waits, as last read: writes soonest to expire first, then questions."""
        return self.inbox.entries

    async def on_unmount(self) -> None:
        """Leave with the store closed (see FleetScreen.on_unmount)."""
        self._stop_following.set()
        with contextlib.suppress(TimeoutError):
            await bounded(self._store_closed.wait(), 2.0)

    @on(InboxChanged)
    def _changed(self) -> None:
        self.render_inbox()

    def _tick(self) -> None:
        self.render_inbox()

    def on_resize(self) -> None:
        self.call_after_refresh(self.render_inbox)  # the list's columns for its new width

    def render_inbox(self) -> None:
        table = self.query_one("#inbox-table", DataTable)
        selected = self.selected()
        chosen = selected.key if selected else None
        index = table.cursor_row
        now = self.now()
        rows = [
            (entry.key, entry_cells(entry, self._deciding.get(entry.key, expiry(entry, now))))
            for entry in self.entries
        ]
        inside = table.scrollable_content_region.width or max(self.size.width - 2, 0)
        shape = layout([row for _, row in rows], inside)
        table.clear(columns=shape != self._layout)
        if shape != self._layout:
            for name, width in shape.widths:
                table.add_column(name, key=name, width=width)
            self._layout = shape
        for key, row in rows:
            table.add_row(*shape.cells(row), key=key)
        if chosen is not None and chosen in table.rows:
            table.move_cursor(row=table.get_row_index(chosen), animate=False)
        elif table.row_count:
            table.move_cursor(row=min(index, table.row_count - 1), animate=False)
        questions = sum(1 for e in self.entries if isinstance(e, PendingQuestion))
        unknown = sum(1 for e in self.entries if isinstance(e, PendingOutcome))
        asked = f" and {plural(questions, 'question')}" if questions else ""
        asked += f" and {plural(unknown, 'unknown outcome')}" if unknown else ""
        waiting = len(self.entries) - questions - unknown
        self.query_one("#inbox-header", Static).update(
            f"[b]Approvals inbox[/] · {plural(waiting, 'write')}{asked} waiting across all runs"
        )
        self._show(self.selected())

    def selected(self) -> InboxEntry | None:
        table = self.query_one("#inbox-table", DataTable)
        if not table.row_count or not self.entries:
            return None
        key = table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value
        return next((e for e in self.entries if e.key == key), None)

    @on(DataTable.RowHighlighted, "#inbox-table")
    def _highlighted(self) -> None:
        self._show(self.selected())

    def _show(self, entry: InboxEntry | None) -> None:
        self.refresh_bindings()  # the keys the selected entry takes
        body = self.query_one("#inbox-body", Static)
        title(self.query_one("#inbox-detail"), f"Selected {_called(entry)}")
        if entry is None:
            body.update("[dim]nothing waiting for you[/dim]")
            return
        body.update(described(entry))

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "close":
            return True
        if action == "send":
            box = self.query_one("#inbox-reason", Input) if self.is_mounted else None
            if box is None or not box.display or self.focused is not box:
                return False
            answering = isinstance(self._typing_for, PendingQuestion)
            return answering == (parameters[:1] == ("answer",))
        if typing_into(self.focused):
            return False
        entry = self.selected() if self.is_mounted else None
        if action == "edit" and isinstance(entry, PendingWrite):
            how = parameters[0] if parameters else "edit"
            # `e` edits the arguments, or tells the agent on a call that cannot run an edit
            return how == "grant" or (how == "tell") == bool(entry.not_editable)
        if action in ("reject", "edit"):
            return isinstance(entry, PendingWrite)
        if action == "approve":
            return isinstance(entry, PendingWrite | PendingQuestion)
        if action == "outcome":
            return isinstance(entry, PendingOutcome)
        if action == "message":  # a run that ended has nobody left to hear it
            return entry is not None and not (isinstance(entry, PendingOutcome) and not entry.live)
        return True

    def action_approve(self) -> None:
        entry = self.selected()
        if isinstance(entry, PendingQuestion):
            box = self.query_one("#inbox-reason", Input)
            forms = visible(", ".join(answer_forms(entry.choices)))
            box.placeholder = (
                f"one of: {forms}; enter sends it" if forms else "your answer, enter sends it"
            )
            self._show_box(box, True, entry)
        elif entry is not None:
            self._decide(entry, True, "")

    def action_reject(self) -> None:
        entry = self.selected()
        if not isinstance(entry, PendingWrite):
            return
        box = self.query_one("#inbox-reason", Input)
        box.placeholder = f"reason for the model (optional), enter rejects {entry.call_id}"
        self._show_box(box, True, entry)

    @on(Input.Submitted, "#inbox-reason")
    def _reason(self, event: Input.Submitted) -> None:
        entry = self._typing_for  # never the entry the cursor moved to meanwhile
        if isinstance(entry, PendingQuestion) and (problem := entry.refusal(event.value)):
            toast(self, f"{entry.call_id}: {problem}", title="not answered", severity="warning")
            return  # the box stays open with what was typed
        event.input.value = ""
        self._show_box(event.input, False)
        if isinstance(entry, PendingQuestion):
            self._answer(entry, event.value.strip())
        elif entry is not None:
            self._decide(entry, False, event.value.strip())

    @work(group="inbox-decide", exit_on_error=False, description="answer from the inbox")
    async def _answer(self, entry: PendingQuestion, text: str) -> None:
        async def answer(tell: Tell) -> str | None:
            won = await self.inbox.answer(entry, text, tell)
            return None if won else f"{entry.call_id} was already answered"

        if text:
            await self._record(entry, answer)

    @work(group="inbox-decide", exit_on_error=False, description="decide from the inbox")
    async def _decide(
        self, entry: PendingWrite, approved: bool, reason: str, made: ApprovalDecision | None = None
    ) -> None:
        """`made`: the edit or the grant of `e` / `g` (an approval), or what `e` tells the
        agent (a rejection, its reason the instruction)."""
        args, grant = (made.args, made.grant) if made else (None, None)

        async def decide(tell: Tell) -> str | None:
            won = await self.inbox.decide(entry, approved, reason, tell, args=args, grant=grant)
            return None if won else f"{entry.call_id} not decided here: {NOT_TAKEN}"

        await self._record(entry, decide)

    def action_edit(self, how: str) -> None:
        """`e` / `g`: the write's arguments edited (or, on a call that cannot run an edit,
        what to tell the agent instead), or a standing grant chosen, in a dialog; the
        decision it makes goes to the store as `a` (or `r`, for what the agent is told)
        would."""
        from loopdeck.tui.decision_dialogs import WriteDecisionDialog

        entry = self.selected()
        if not isinstance(entry, PendingWrite):
            return

        def made(decision: ApprovalDecision | None) -> None:
            if decision is not None:
                self._decide(entry, decision.approved, decision.reason, decision)

        dialog = WriteDecisionDialog(
            how, entry.call_id, entry.tool, entry.args, entry.args_schema, by=BY,
            not_editable=entry.not_editable,
        )  # fmt: skip
        self.app.push_screen(dialog, made)

    def action_outcome(self) -> None:
        from loopdeck.tui.decision_dialogs import OutcomeDialog

        entry = self.selected()
        if not isinstance(entry, PendingOutcome):
            return

        def said(applied: bool | None) -> None:
            if applied is not None:
                self._resolve(entry, applied)

        self.app.push_screen(OutcomeDialog(entry.call_id, entry.tool, entry.args), said)

    @work(group="inbox-decide", exit_on_error=False, description="an outcome from the inbox")
    async def _resolve(self, entry: PendingOutcome, applied: bool) -> None:
        await self._record(entry, lambda tell: self.inbox.resolve(entry, applied, tell))

    def action_message(self) -> None:
        from loopdeck.tui.message_dialog import MessageDialog

        entry = self.selected()
        if entry is None:
            return

        def typed(text: str | None) -> None:
            if text is not None:
                self._message(entry, text)

        self.app.push_screen(MessageDialog(entry.run_id), typed)

    @work(group="inbox-decide", exit_on_error=False, description="message from the inbox")
    async def _message(self, entry: InboxEntry, text: str) -> None:
        try:
            await self.inbox.message(entry, text)
        except StoreError as exc:
            toast(self, str(exc), title="message not sent", severity="error", timeout=30)
            return
        toast(self, f"message sent to run {entry.run_id}: heard before its model's next turn")

    async def _record(self, entry: InboxEntry, record: Record) -> None:
        """One decision to the store: its entry says so while it waits (a held lock is
        retried, the operator told); a store error is shown and the entry stays pending."""
        key = entry.key
        if key in self._deciding:
            toast(self, f"{entry.call_id}: your decision is on its way to the store")
            return
        self._deciding[key] = "sending…"
        self.render_inbox()

        def tell(message: str) -> None:
            self._deciding[key] = "retrying…"
            toast(self, message, title="store", severity="warning", timeout=10)
            self.render_inbox()

        try:
            why_not = await record(tell)
        except StoreError as exc:
            toast(self, str(exc), title="not recorded", severity="error", timeout=30)
            return
        finally:
            self._deciding.pop(key, None)
            self.render_inbox()
        if why_not is not None:
            toast(self, why_not, severity="warning")
        self.inbox.drop(entry)
        self.render_inbox()

    @on(Worker.StateChanged)
    def _worker_changed(self, event: Worker.StateChanged) -> None:
        """A worker of the inbox that failed (the store would not open, a decision broke) is
        said, never silent."""
        worker_failed(self, event, title="inbox")

    def _show_box(self, box: Input, shown: bool, entry: InboxEntry | None = None) -> None:
        """The answer or reason box opened for `entry` (focused; the toasts make room below
        it, never over it) or closed (the table has the focus again)."""
        self._typing_for = entry if shown else None
        box.display = shown
        self.set_class(shown, "-typing")
        (box if shown else self.query_one("#inbox-table")).focus()

    async def action_send(self, what: str) -> None:
        """enter in the open box: what it holds goes as the answer or the rejection's reason."""
        await self.query_one("#inbox-reason", Input).action_submit()

    def action_close(self) -> None:
        box = self.query_one("#inbox-reason", Input)
        if box.display:
            self._show_box(box, False)
            return
        self.dismiss(None)


def _called(entry: InboxEntry | None) -> str:
    """What the detail's title calls the selected entry: a question is never a write."""
    if isinstance(entry, PendingQuestion):
        return "question"
    if isinstance(entry, PendingOutcome):
        return "outcome"
    return "write"
