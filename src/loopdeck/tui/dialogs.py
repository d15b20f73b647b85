"""Modal dialogs: approve or reject a write, give a rejection reason, confirm a kill."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from rich.markup import escape
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Static

from loopdeck.core.approvals import ApprovalRequest
from loopdeck.core.text import visible_json
from loopdeck.tui.panels import countdown_text


@dataclass(frozen=True)
class ApprovalAnswer:
    call_id: str
    approved: bool
    reason: str = ""


class ApprovalDialog(ModalScreen[ApprovalAnswer | None]):
    """One write waiting for the operator. Esc leaves it pending."""

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

    def compose(self) -> ComposeResult:
        r = self.request
        with Vertical(id="approval-box"):
            yield Static(id="approval-title")
            yield Static(
                f"[b]{escape(r.tool)}[/]   risk [b $risk-{self.risk}]{self.risk}[/]\n"
                f"[b]plan step[/] {escape(r.plan_step or '—')}\n"
                f"[b]fingerprint[/] {r.fingerprint}   [b]state[/] {r.state_hash}   "
                f"[b]call[/] {r.call_id}",
                id="approval-meta",
            )
            yield Static(escape(visible_json(r.args)), id="approval-args")
            yield Static(id="approval-expiry")
            yield Static("[b]a[/] approve   [b]r[/] reject with a reason   [b]esc[/] decide later")

    def on_mount(self) -> None:
        self.set_title(self.waiting)
        self._tick()
        self.set_interval(1.0, self._tick)

    def set_title(self, waiting: int) -> None:
        self.waiting = waiting
        self.query_one("#approval-title", Static).update(
            f"[b]Approve this write?[/]  ({waiting} waiting)"
        )
        self.query_one("#approval-box").border_title = f"Approval · {waiting} waiting"

    def _tick(self) -> None:
        left = (self.request.expires_at - self._now()).total_seconds()
        text = "expired: approving asks again" if left <= 0 else countdown_text(left)
        self.query_one("#approval-expiry", Static).update(f"[b]receipt expires in[/] {text}")

    def action_approve(self) -> None:
        self.dismiss(ApprovalAnswer(self.request.call_id, approved=True))

    def action_reject(self) -> None:
        def reasoned(reason: str | None) -> None:
            if reason is not None:
                self.dismiss(ApprovalAnswer(self.request.call_id, approved=False, reason=reason))

        self.app.push_screen(RejectReasonDialog(self.request.tool), reasoned)

    def action_close(self) -> None:
        self.dismiss(None)


class RejectReasonDialog(ModalScreen[str | None]):
    """An optional reason that goes back to the model. Esc returns to the approval."""

    BINDINGS = [Binding("escape", "cancel", "Back", id="reject.cancel")]

    def __init__(self, tool: str) -> None:
        super().__init__(classes="dialog")
        self.tool = tool

    def compose(self) -> ComposeResult:
        with Vertical(id="reject-box"):
            yield Static(f"Reject [b]{escape(self.tool)}[/]. Reason for the model (optional):")
            yield Input(
                placeholder="e.g. wrong address, ask the customer first", id="reject-reason"
            )
            yield Static("[b]enter[/] reject   [b]esc[/] back")

    def on_mount(self) -> None:
        self.query_one(Input).focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.dismiss(event.value.strip())

    def action_cancel(self) -> None:
        self.dismiss(None)


class ConfirmKillDialog(ModalScreen[bool]):
    BINDINGS = [
        Binding("y", "confirm", "Kill now", id="kill.confirm"),
        Binding("n,escape", "cancel", "Keep running", id="kill.cancel"),
    ]

    def __init__(self) -> None:
        super().__init__(classes="dialog")

    def compose(self) -> ComposeResult:
        with Vertical(id="kill-box"):
            yield Static(
                "[b $error]Kill the run now?[/]\nThe in-flight model or tool call is cancelled.\n\n"
                "[b]y[/] kill now   [b]n[/] keep running"
            )

    def action_confirm(self) -> None:
        self.dismiss(True)

    def action_cancel(self) -> None:
        self.dismiss(False)
