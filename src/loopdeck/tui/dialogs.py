"""Modal dialogs: approve or reject a write (with a reason typed in place, its arguments
edited in place, or a standing grant chosen in place), confirm a kill or a quit. A question
to the operator is `question_dialog`'s. A write whose call cannot carry an edit out (the agent
runs its own input) is never approved edited: `e` tells the agent what to run instead, as a
rejection."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import datetime

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Input, Static

from loopdeck.core.approvals import ApprovalDecision, ApprovalRequest
from loopdeck.tui.approval_parts import (
    ARGS_FIRST,
    EDIT_KEYS,
    GONE_KEYS,
    GRANT_KEYS,
    TOLD_KEYS,
    FittingBox,
    args_shown,
    arguments_drawn,
    main_keys,
)
from loopdeck.tui.args_edit import ArgsEdit
from loopdeck.tui.grant_chooser import GrantChooser
from loopdeck.tui.keys_bar import KeysBar
from loopdeck.tui.panels import countdown_text
from loopdeck.tui.shown import markup
from loopdeck.tui.shown_input import TYPING_KEYS, ShownInput, typing_into
from loopdeck.tui.timers import every

BY = "console"  # who decided, as the store and the events have it
FULL_SAVES = 4  # the rows a box's `-full` look leaves out (the stylesheet's `.-full` rules)


class ApprovalDialog(ModalScreen[ApprovalDecision | None]):
    """One write waiting for the operator: what, why, from which plan step. Esc leaves it
    pending. `r` opens the reason box below the arguments, never over them; `e` the
    arguments' editor (`ctrl+o` approves what it holds, only once it passes the tool's
    schema); `g` the grant chooser (enter approves and grants). Esc from any of them comes
    back here, nothing decided. The decision is the console's (`by`), on this asking of the
    call (`request`: a call can be asked again). A call that cannot run an edit
    (`request.not_editable`, said here) has `e` open the same editor as what to tell the
    agent: `ctrl+o` then rejects, its reason telling the agent to run that input."""

    BINDINGS = [
        Binding("a", "approve", "Approve", id="approval.approve"),
        Binding("r", "reject", "Reject…", id="approval.reject"),  # both answers fit a phone
        Binding("e", "edit", "Edit…", id="approval.edit"),
        Binding("e", "tell", "Tell the agent…", id="approval.tell"),
        Binding("g", "grant", "Grant…", id="approval.grant"),
        Binding("ctrl+o", "approve_edited", "Approve edited", id="approval.approve_edited"),
        Binding("ctrl+o", "tell_edited", "Reject, tell the agent", id="approval.tell_edited"),
        Binding("escape", "close", "Later", id="approval.close"),
        Binding("escape", "back", "Back", id="approval.back"),  # from a box opened in place
        Binding("escape", "leave", "Close", id="approval.leave"),  # decided elsewhere (`gone`)
    ]
    # Under 28 rows the grant chooser takes the arguments' place (its fields box holds one).
    VERTICAL_BREAKPOINTS = [(0, "-cramped"), (28, "-roomy")]

    def __init__(
        self, request: ApprovalRequest, waiting: int, risk: str, now: Callable[[], datetime]
    ) -> None:
        super().__init__(classes="dialog")
        self.request = request
        self.waiting = waiting
        self.risk = risk
        self._now = now
        self.mode = ""  # what is open in place: "", "reason", "edit" or "grant"
        # Made whole here, never looked up on mount: a dialog withdrawn before its mount ran
        # (its request decided elsewhere) has no children left to find by then.
        self._box = FittingBox(self.fit, id="approval-box")
        self._title = Static(id="approval-title")
        self._words = VerticalScroll(id="approval-words")  # what gives way to the arguments
        self.main_keys = main_keys(self.BINDINGS, bool(request.not_editable))
        self._expiry = Static(id="approval-expiry")
        self._keys = Static(self.main_keys, id="approval-keys")
        # Docked at the box's bottom: whatever the evidence's length, the keys stay in view.
        self._foot = Vertical(id="approval-foot", classes="dialog-foot")
        self._args = VerticalScroll(id="approval-args")
        self._args.border_title = "arguments"
        self._reason = ShownInput(
            placeholder="reason for the model (optional), enter rejects, esc goes back",
            id="reject-reason",
        )
        self._reason.display = False
        # The editor and the chooser are made when first opened: most approvals need neither.
        self.editing: ArgsEdit | None = None
        self.granting: GrantChooser | None = None
        self.gone_said: str | None = None  # decided elsewhere or withdrawn: what is said
        self.set_title(self.waiting)
        self.tick_countdown()

    def compose(self) -> ComposeResult:
        r = self.request
        risk_var = "read" if self.risk == "read" else "write"  # a theme variable's name
        with self._box:
            yield self._title
            yield Static(
                markup(
                    f"[b]$tool[/]   risk [b $risk-{risk_var}]$risk[/]$source   [b]call[/] $call",
                    tool=r.tool,
                    risk=self.risk,
                    source=f" ({r.risk_source})" if r.risk_source else "",
                    call=r.call_id,
                ),
                id="approval-tool",
            )
            with self._words:
                yield from self._words_shown()
            with self._args:
                yield from args_shown(r)
            yield Static(
                markup(
                    "[dim]fingerprint $fingerprint   state $state[/]",
                    fingerprint=r.fingerprint,
                    state=r.state_hash,
                ),
                id="approval-ids",
            )
            with self._foot:
                yield self._expiry
                yield self._reason
                yield self._keys
        yield KeysBar()

    def _words_shown(self) -> Iterator[Static]:
        """What gives way when the box is short (`fit`): why the call is asked again, what
        cannot be edited, the rule that asks, the plan step and the model's words."""
        r = self.request
        if r.asked_again:
            yield Static(
                markup(
                    "[b $warning]Asked again:[/] $again. "
                    "The earlier approval did not cover this call any more.",
                    again=r.asked_again,
                ),
                id="approval-again",
            )
        if r.not_editable:
            yield Static(
                markup(
                    "[b $warning]Not editable:[/] $why. [b]e[/] rejects it and tells the "
                    "agent what to run instead.",
                    why=r.not_editable,
                ),
                id="approval-not-editable",
            )
        if r.asked_by is not None:
            yield Static(
                markup("[b $warning]Asked by[/] $rule", rule=r.asked_by.with_why()),
                id="approval-asked-by",
            )
        yield Static(
            markup(
                "[b]plan step[/] $step\n[b]why[/] "
                + ("$why" if r.rationale else "[dim]no text[/]"),
                step=r.plan_step or "—",
                why=r.rationale,
            ),
            id="approval-meta",
        )

    def on_mount(self) -> None:
        every(self, 1.0, self.tick_countdown)

    def fit(self) -> None:
        """The arguments keep their first lines in view whatever the room: where the box
        cannot hold all it shows (a small terminal, a toast's strip below it, the reason box
        open), the words above them give way and scroll (`-full`); once they fit again, the
        box is as tall as what it shows. It leaves `-full` only with room for the rows that
        look leaves out, so it never goes back and forth."""
        box, words = self._box, self._words
        width = words.container_size.width
        room = words.size.height - words.get_content_height(words.size, self.app.size, width)
        if self.mode not in ("", "reason"):  # the editor or the chooser has the room
            box.remove_class("-full")
        elif not box.has_class("-full"):
            box.set_class(box.max_scroll_y > 0, "-full")
        elif room >= FULL_SAVES and not self._args.max_scroll_y:
            box.remove_class("-full")

    def set_title(self, waiting: int) -> None:
        self.waiting = waiting
        if self.gone_said is not None:
            return
        self._title.update(f"[b]Approve this write?[/]  ({waiting} waiting)")
        self._box.border_title = f"Approval · {waiting} waiting"

    def gone(self, said: str) -> None:
        """Its write was decided elsewhere (or went with the run) while on screen: it stays,
        saying so, with no key left that decides, whatever box is open (the letters typed
        next never land on another write); esc leaves it, and only then comes the next."""
        self.gone_said = said
        self._title.update("[b $warning]No longer waiting for you[/]")
        self._box.border_title = "Approval · no longer waiting"
        self._expiry.update(markup("[b $warning]$said[/]: nothing typed here is sent", said=said))
        self._keys.update(GONE_KEYS)
        self.refresh_bindings()

    def tick_countdown(self) -> None:
        if self.gone_said is not None:
            return
        left = (self.request.expires_at - self._now()).total_seconds()
        if left <= 0:
            text = (
                "[b $error]The receipt has expired.[/] Approving now asks you again with a "
                "fresh receipt; rejecting still goes back to the model."
            )
        else:
            text = f"[b]receipt valid for[/] {countdown_text(left)}"
        self._expiry.update(text)

    @property
    def typing(self) -> bool:
        return typing_into(self.focused)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if self.gone_said is not None or action == "leave":
            return action == "leave" and self.gone_said is not None
        if action in ("approve", "reject"):
            return self.mode in ("", "reason") and not self.typing
        if action in ("edit", "tell"):  # `e`: one or the other, as the call can carry out
            offered = "tell" if self.request.not_editable else "edit"
            return action == offered and self.mode == "" and not self.typing
        if action == "grant":
            return self.mode == "" and not self.typing
        if action == "approve_edited":
            return self.mode == "edit"
        if action == "tell_edited":
            return self.mode == "tell"
        if action in ("close", "back"):  # the same key: later, or back from a box
            return (action == "back") == bool(self.mode)
        return True

    def _set_mode(self, mode: str, keys: str | Content) -> None:
        self.mode = mode
        self.set_class(mode in ("edit", "tell"), "-editing")
        self.set_class(mode == "grant", "-granting")
        self._keys.update(keys)
        self.refresh_bindings()
        self.call_after_refresh(self.fit)  # the foot's height changed, not the box's

    def action_approve(self) -> None:
        if self._arguments_seen():
            self.dismiss(ApprovalDecision(call_id=self.request.call_id, approved=True, by=BY))

    def _arguments_seen(self) -> bool:
        """A write is approved (or granted) only while its arguments' first lines are drawn:
        else they are scrolled into view and said, and the key does nothing this time."""
        if arguments_drawn(self, self._args):
            return True
        if self._args.is_mounted:  # composed: at least one text (`args_shown`)
            self._box.scroll_to_widget(self._args, animate=False, top=True)
        self._keys.update(ARGS_FIRST)
        return False

    def action_reject(self) -> None:
        self._reason.display = True
        self._set_mode(
            "reason",
            markup(
                f"Reject [b]$tool[/]: [b]enter[/] reject   [b]esc[/] back\n{TYPING_KEYS}",
                tool=self.request.tool,
            ),
        )
        self._reason.focus()

    @on(Input.Submitted, "#reject-reason")
    def _rejected(self, event: Input.Submitted) -> None:
        if self.gone_said is not None:
            return
        reason = event.value.strip()
        call_id = self.request.call_id
        self.dismiss(ApprovalDecision(call_id=call_id, approved=False, reason=reason, by=BY))

    def action_edit(self) -> None:
        self._open_editor()
        self._set_mode("edit", EDIT_KEYS)

    def action_tell(self) -> None:
        """`e` on a call that cannot run an edit: the editor, as what to tell the agent."""
        self._open_editor()
        self._set_mode("tell", TOLD_KEYS)

    def _open_editor(self) -> None:
        r = self.request
        if self.editing is None:
            self.editing = ArgsEdit(r.args, r.args_schema, r.not_editable, id="approval-edit")
            self._box.mount(self.editing, before=self._foot)
            self.call_after_refresh(self.editing.editor.focus)
        else:
            self.editing.display = True
            self.editing.start()

    def action_approve_edited(self) -> None:
        """Only arguments that pass the tool's schema are sent; the same as proposed is a
        plain approval."""
        if self.editing is None:
            return
        if (decision := self.editing.approval(self.request.call_id, BY)) is not None:
            self.dismiss(decision)

    def action_tell_edited(self) -> None:
        """A rejection whose reason tells the agent to run what the box holds; nothing while
        it does not pass or is as proposed."""
        if self.editing is None:
            return
        if (decision := self.editing.told(self.request.call_id, BY)) is not None:
            self.dismiss(decision)

    def action_grant(self) -> None:
        if not self._arguments_seen():  # the chooser takes their place at 80x24
            return
        r = self.request
        if self.granting is None:
            self.granting = GrantChooser(r.tool, r.args, r.args_schema, id="approval-grant")
            self._box.mount(self.granting, before=self._foot)
            self.call_after_refresh(self.granting.start)
        else:
            self.granting.display = True
            self.granting.start()
        self._set_mode("grant", GRANT_KEYS)

    @on(GrantChooser.Confirmed)
    def _granted(self) -> None:
        """A grant that cannot be read is said under the chooser and never sent."""
        assert self.granting is not None
        if self.gone_said is not None:
            return
        if (decision := self.granting.approval(self.request.call_id, BY)) is not None:
            self.dismiss(decision)

    def action_back(self) -> None:
        self.action_close()

    def action_leave(self) -> None:
        self.dismiss(None)

    def action_close(self) -> None:
        """From a box opened in place: back to the dialog's keys. Else: decide later."""
        opened = {"reason": self._reason, "grant": self.granting}
        widget = self.editing if self.mode in ("edit", "tell") else opened.get(self.mode)
        if widget is not None:
            widget.display = False
            self._set_mode("", self.main_keys)
            self._args.focus()
            return
        self.dismiss(None)


class ConfirmDialog(ModalScreen[bool]):
    """y / n on something that ends the run."""

    BINDINGS = [
        Binding("y", "confirm", "Yes", id="confirm.yes"),
        Binding("n,escape", "cancel", "No", id="confirm.no"),
    ]

    def __init__(self, text: str | Content) -> None:
        """`text` is loopdeck's markup, or `Content` holding outside text (`shown.markup`)."""
        super().__init__(classes="dialog")
        self.text = text

    def compose(self) -> ComposeResult:
        with Vertical(id="kill-box"):
            yield Static(self.text)
        yield KeysBar()

    def action_confirm(self) -> None:
        self.dismiss(True)

    def action_cancel(self) -> None:
        self.dismiss(False)


class ConfirmKillDialog(ConfirmDialog):
    def __init__(self) -> None:
        super().__init__(
            "[b $error]Kill the run now?[/]\nThe in-flight model or tool call is cancelled.\n\n"
            "[b]y[/] kill now   [b]n[/] keep running"
        )


class ConfirmQuitDialog(ConfirmDialog):
    def __init__(self) -> None:
        super().__init__(
            "[b $error]Quit and kill the live run?[/]\nThe in-flight call is cancelled and the "
            "run ends [b]killed[/], recorded as killed by you.\n\n"
            "[b]y[/] kill and quit   [b]n[/] keep watching"
        )
