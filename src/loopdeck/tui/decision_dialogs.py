"""The dialogs of decisions beyond yes and no, outside the approval dialog: a write whose
outcome is unknown (`o`: did it take effect?), a standing grant revoked (`G`: which one),
and a write of the inbox edited or granted (`e`, `g`: the approval dialog's editor and
chooser in a dialog of their own; `e` on a call that cannot run an edit tells the agent what
to run instead, as a rejection)."""

from __future__ import annotations

from typing import Any

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import OptionList, Static
from textual.widgets.option_list import Option

from loopdeck.core.approvals import ApprovalDecision
from loopdeck.core.text import short_args
from loopdeck.operator.grant_book import GrantRow
from loopdeck.tui.args_edit import ArgsEdit
from loopdeck.tui.grant_chooser import GrantChooser
from loopdeck.tui.keys_bar import KeysBar
from loopdeck.tui.shown import markup, plain

UNKNOWN_WHY = (
    "Its outcome is unknown: it timed out, failed midway or was cut short, so it may or may "
    "not have taken effect. Only you can tell: look at what it writes to."
)
EDIT_KEYS = "[b]ctrl+o[/] approve with these arguments   [b]esc[/] back, nothing decided"
TOLD_KEYS = (
    "[b]ctrl+o[/] reject, telling the agent to run this input   [b]esc[/] back, nothing decided"
)
OUTCOME_KEYS = (
    "[b]y[/] it took effect (recorded as executed)\n"
    "[b]n[/] it did not (recorded as failed: the model may propose it again, asked again)\n"
    "[b]esc[/] later"
)


class OutcomeDialog(ModalScreen[bool | None]):
    """Did this write take effect? `y` applied, `n` not applied, esc later (nothing said)."""

    BINDINGS = [
        Binding("y", "say(True)", "Applied", id="outcome.applied"),
        Binding("n", "say(False)", "Not applied", id="outcome.not_applied"),
        Binding("escape", "close", "Later", id="outcome.close"),
    ]

    def __init__(
        self,
        call_id: str,
        tool: str,
        args: dict[str, Any] | None,
        result: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(classes="dialog")
        self.call_id = call_id
        self.tool = tool
        self.args = args
        self.result = result  # the call's result: its error says why the outcome is unknown

    def compose(self) -> ComposeResult:
        box = Vertical(id="outcome-box")
        box.border_title = plain(f"Outcome unknown · {self.call_id}")
        with box:
            yield Static(
                markup(
                    "[b]Did $call $tool($args) take effect?[/]\n\n$why",
                    call=self.call_id,
                    tool=self.tool,
                    args=short_args(self.args or {}, 120),
                    why=UNKNOWN_WHY,
                ),
                id="outcome-question",
            )
            yield Static(outcome_error(self.result), id="outcome-error")
            yield Static(OUTCOME_KEYS, id="outcome-keys", classes="dialog-foot")
        yield KeysBar()

    def action_say(self, applied: bool) -> None:
        self.dismiss(applied)

    def action_close(self) -> None:
        self.dismiss(None)


def outcome_error(result: dict[str, Any] | None) -> Content:
    """The error that left the outcome unknown, as the call's result has it: its code (where
    it came from: a timeout, a crash, a cut) and its message."""
    error = (result or {}).get("error")
    if not isinstance(error, dict):
        return markup("[b]error[/] [dim]none recorded (the run was cut short before one)[/]")
    return markup(
        "[b]error[/] [b $error]$code[/]: $message",
        code=error.get("code") or "no code",
        message=error.get("message") or "no message",
    )


class GrantPicker(ModalScreen[str | None]):
    """Several grants active: the one to revoke, chosen with the arrows and enter."""

    BINDINGS = [Binding("escape", "close", "Keep them", id="grants.close")]
    AUTO_FOCUS = "#grant-picker"

    def __init__(self, rows: list[GrantRow]) -> None:
        super().__init__(classes="dialog")
        self.rows = rows

    def compose(self) -> ComposeResult:
        box = Vertical(id="picker-box")
        box.border_title = "Revoke a grant"
        with box:
            yield Static("Later calls the revoked grant covered are asked again.")
            yield OptionList(
                *(Option(plain(grant_line(row)), id=row.grant_id) for row in self.rows),
                id="grant-picker",
            )
            yield Static("[b]enter[/] revoke   [b]esc[/] keep them all", id="picker-keys")
        yield KeysBar()

    @on(OptionList.OptionSelected, "#grant-picker")
    def _picked(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(event.option.id)

    def action_close(self) -> None:
        self.dismiss(None)


def grant_line(row: GrantRow) -> str:
    """One grant in a line: `g1 update_delivery_address · any arguments, 2 uses · 1 used,
    1 left · active · by console`."""
    return (
        f"{row.grant_id} {row.tool} · {row.rule} · {row.uses_text()} · {row.state()} · by {row.by}"
    )


class WriteDecisionDialog(ModalScreen[ApprovalDecision | None]):
    """A write of the inbox, edited (`edit`) or granted (`grant`) as in the approval dialog:
    `ctrl+o` approves the edited arguments once they pass, enter approves and grants; esc goes
    back with nothing decided. `tell` (a call that cannot run an edit: `not_editable`, said
    here): the editor holds what to tell the agent, `ctrl+o` rejects with it as the reason."""

    BINDINGS = [
        Binding("ctrl+o", "approve_edited", "Approve edited", id="write.approve_edited"),
        Binding("ctrl+o", "tell_edited", "Reject, tell the agent", id="write.tell_edited"),
        Binding("escape", "close", "Back", id="write.close"),
    ]
    TITLES = {"edit": "Edit", "tell": "Reject and tell the agent", "grant": "Grant"}

    def __init__(
        self,
        how: str,
        call_id: str,
        tool: str,
        args: dict[str, Any],
        schema: dict[str, Any],
        by: str,
        not_editable: str = "",
    ) -> None:
        super().__init__(classes="dialog")
        self.how, self.call_id, self.by = how, call_id, by
        self.not_editable = not_editable if how == "tell" else ""
        self.editing = (
            ArgsEdit(args, schema, self.not_editable, id="approval-edit")
            if how in ("edit", "tell")
            else None
        )
        self.granting = (
            None if self.editing else GrantChooser(tool, args, schema, id="approval-grant")
        )
        self._box = Vertical(id="write-box", classes="-edit" if self.editing else "-grant")
        self._box.border_title = plain(f"{self.TITLES[how]} · {call_id} {tool}")

    def compose(self) -> ComposeResult:
        with self._box:
            if self.not_editable:
                yield Static(
                    markup("[b $warning]Not editable:[/] $why.", why=self.not_editable),
                    id="write-not-editable",
                )
            if self.editing is not None:
                yield self.editing
                yield Static(TOLD_KEYS if self.not_editable else EDIT_KEYS, id="write-keys")
            else:
                assert self.granting is not None
                yield self.granting
                yield Static("[b]enter[/] approve and grant   [b]esc[/] back", id="write-keys")
        yield KeysBar()

    def on_mount(self) -> None:
        if self.editing is not None:
            self.editing.editor.focus()
        elif self.granting is not None:
            self.granting.start()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "approve_edited":
            return self.how == "edit"
        if action == "tell_edited":
            return self.how == "tell"
        return True

    def action_approve_edited(self) -> None:
        assert self.editing is not None
        if (decision := self.editing.approval(self.call_id, self.by)) is not None:
            self.dismiss(decision)

    def action_tell_edited(self) -> None:
        """A rejection whose reason tells the agent to run what the box holds."""
        assert self.editing is not None
        if (decision := self.editing.told(self.call_id, self.by)) is not None:
            self.dismiss(decision)

    @on(GrantChooser.Confirmed)
    def _granted(self) -> None:
        assert self.granting is not None
        if (decision := self.granting.approval(self.call_id, self.by)) is not None:
            self.dismiss(decision)

    def action_close(self) -> None:
        self.dismiss(None)
