"""Modal dialogs: approve or reject a write (with a reason typed in place), confirm a kill or
a quit. A question to the operator is `question_dialog`'s."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Input, Static

from loopdeck.core.approvals import ApprovalDecision, ApprovalRequest
from loopdeck.core.text import visible_json
from loopdeck.tui.panels import countdown_text
from loopdeck.tui.shown import markup, plain
from loopdeck.tui.shown_input import ShownInput

BY = "console"  # who decided, as the store and the events have it
KEYS = "[b]a[/] approve   [b]r[/] reject with a reason   [b]esc[/] decide later"


class ApprovalDialog(ModalScreen[ApprovalDecision | None]):
    """One write waiting for the operator: what, why, from which plan step. Esc leaves it
    pending. `r` opens the reason box below the arguments, never over them. The decision is
    the console's (`by`), on this asking of the call (`request`: a call can be asked again)."""

    BINDINGS = [
        Binding("a", "approve", "Approve", id="approval.approve"),
        Binding("r", "reject", "Reject…", id="approval.reject"),
        Binding("escape", "close", "Later", id="approval.close"),
    ]

    def __init__(
        self, request: ApprovalRequest, waiting: int, risk: str, now: Callable[[], datetime]
    ) -> None:
        super().__init__(classes="dialog")
        self.request = request
        self.waiting = waiting
        self.risk = risk
        self._now = now
        # Made whole here, never looked up on mount: a dialog withdrawn before its mount ran
        # (its request decided elsewhere) has no children left to find by then.
        self._box, self._title = Vertical(id="approval-box"), Static(id="approval-title")
        self._expiry, self._keys = Static(id="approval-expiry"), Static(KEYS, id="approval-keys")
        self._args = VerticalScroll(id="approval-args")
        self._args.border_title = "arguments"
        self._reason = ShownInput(
            placeholder="reason for the model (optional), enter rejects, esc goes back",
            id="reject-reason",
        )
        self._reason.display = False
        self.set_title(self.waiting)
        self._tick()

    def compose(self) -> ComposeResult:
        r = self.request
        risk_var = "read" if self.risk == "read" else "write"  # a theme variable's name
        with self._box:
            yield self._title
            if r.asked_again:
                yield Static(
                    markup(
                        "[b $warning]Asked again:[/] $again. "
                        "The earlier approval did not cover this call any more.",
                        again=r.asked_again,
                    ),
                    id="approval-again",
                )
            yield Static(
                markup(
                    f"[b]$tool[/]   risk [b $risk-{risk_var}]$risk[/]   [b]call[/] $call\n"
                    "[b]plan step[/] $step\n"
                    "[b]why[/] " + ("$why" if r.rationale else "[dim]no text[/]"),
                    tool=r.tool,
                    risk=self.risk,
                    call=r.call_id,
                    step=r.plan_step or "—",
                    why=r.rationale,
                ),
                id="approval-meta",
            )
            with self._args:
                yield Static(plain(visible_json(r.args)))
            yield Static(
                markup(
                    "[dim]fingerprint $fingerprint   state $state[/]",
                    fingerprint=r.fingerprint,
                    state=r.state_hash,
                ),
                id="approval-ids",
            )
            yield self._expiry
            yield self._reason
            yield self._keys

    def on_mount(self) -> None:
        self.set_interval(1.0, self._tick)

    def set_title(self, waiting: int) -> None:
        self.waiting = waiting
        self._title.update(f"[b]Approve this write?[/]  ({waiting} waiting)")
        self._box.border_title = f"Approval · {waiting} waiting"

    def _tick(self) -> None:
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
        return isinstance(self.focused, Input)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        return not (action in ("approve", "reject") and self.typing)

    def action_approve(self) -> None:
        self.dismiss(ApprovalDecision(call_id=self.request.call_id, approved=True, by=BY))

    def action_reject(self) -> None:
        self._reason.display = True
        self._keys.update(
            markup(
                "Reject [b]$tool[/]: [b]enter[/] reject   [b]esc[/] back", tool=self.request.tool
            )
        )
        self._reason.focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        reason = event.value.strip()
        call_id = self.request.call_id
        self.dismiss(ApprovalDecision(call_id=call_id, approved=False, reason=reason, by=BY))

    def action_close(self) -> None:
        if self._reason.display:
            self._reason.display = False
            self._keys.update(KEYS)
            self._args.focus()
            return
        self.dismiss(None)


class ConfirmDialog(ModalScreen[bool]):
    """y / n on something that ends the run."""

    BINDINGS = [
        Binding("y", "confirm", "Yes", id="confirm.yes"),
        Binding("n,escape", "cancel", "No", id="confirm.no"),
    ]

    def __init__(self, text: str) -> None:
        super().__init__(classes="dialog")
        self.text = text

    def compose(self) -> ComposeResult:
        with Vertical(id="kill-box"):
            yield Static(self.text)

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
