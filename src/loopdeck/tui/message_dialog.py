"""`m` on a live run: the operator's message to the agent, typed in a box over the run. The
model hears it before its next turn, as the operator's words; the run does not wait for it.
While the box has the focus, letters are typed: `ctrl+s` stops, `ctrl+k` kills."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Static

from loopdeck.tui.shown import markup
from loopdeck.tui.shown_input import ShownInput

KEYS = (
    "[b]enter[/] send   [b]esc[/] back without sending\n"
    "while typing: [b]ctrl+s[/] stop  [b]ctrl+k[/] kill"
)
ENDED_KEYS = "[b]enter[/] or [b]esc[/] close, nothing sent"
ENDED = (
    "[b $warning]The run has ended:[/] nobody is left to hear a message. What you type here "
    "is not sent."
)
HEARD_WHEN = (
    "The model hears it before its next turn, as your words (a call in flight finishes "
    "first; a batch's results come before it)."
)


class MessageDialog(ModalScreen[str | None]):
    """A box for the operator's message; dismissed with its text, or None (esc). `ended`: the
    run is over; the box still takes what is typed (so no letter runs as a key) and sends
    nothing."""

    BINDINGS = [Binding("escape", "close", "Back", id="message.close")]
    AUTO_FOCUS = "#message-text"

    def __init__(self, run_id: str, ended: bool = False) -> None:
        super().__init__(classes="dialog")
        self.run_id = run_id
        self.ended = ended
        self._box = Vertical(id="message-box")
        ended_title = " · ended" if ended else ""
        self._box.border_title = markup(f"Message · run $run{ended_title}", run=run_id or "…")
        self._text = ShownInput(placeholder="what the agent should hear", id="message-text")
        self._problem = Static(id="message-problem")
        self._problem.display = False

    def compose(self) -> ComposeResult:
        with self._box:
            said = markup("[b]Say to the agent[/]\n$when", when=HEARD_WHEN)
            yield Static(ENDED if self.ended else said)
            yield self._text
            yield self._problem
            yield Static(ENDED_KEYS if self.ended else KEYS, id="message-keys")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if self.ended:
            self.dismiss(None)
            return
        if not event.value.strip():
            self._problem.update("[b $warning]Nothing typed:[/] type a message, or esc.")
            self._problem.display = True
            return
        self.dismiss(event.value)

    def action_close(self) -> None:
        self.dismiss(None)
