"""`m` on a live run: the operator's message to the agent, typed in a box over the run. The
model hears it before its next turn, as the operator's words; the run does not wait for it.
While the box has the focus, letters are typed: `ctrl+s` stops, `ctrl+k` kills, `ctrl+q`
quits."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Static

from loopdeck.tui.keys_bar import KeysBar
from loopdeck.tui.shown import markup, toast
from loopdeck.tui.shown_input import TYPING_KEYS, ShownInput

KEYS = f"[b]enter[/] send   [b]esc[/] back without sending\n{TYPING_KEYS}"
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
        self.ended = False
        self._close_on_resume = False
        self._box = Vertical(id="message-box")
        self._said = Static(markup("[b]Say to the agent[/]\n$when", when=HEARD_WHEN))
        self._keys = Static(KEYS, id="message-keys")
        self._text = ShownInput(placeholder="what the agent should hear", id="message-text")
        self._problem = Static(id="message-problem")
        self._problem.display = False
        self._box.border_title = markup("Message · run $run", run=run_id or "…")
        if ended:
            self.mark_ended()

    def compose(self) -> ComposeResult:
        with self._box:
            yield self._said
            yield self._text
            yield self._problem
            yield self._keys
        yield KeysBar()

    def mark_ended(self) -> None:
        """The run has ended while the box is open: it says so and sends nothing; what is
        typed next is still typed here, never taken as a key."""
        self.ended = True
        self._box.border_title = markup("Message · run $run · ended", run=self.run_id or "…")
        self._said.update(ENDED)
        self._keys.update(ENDED_KEYS)
        self._problem.display = False

    def close_unsent(self) -> None:
        """The operator stopped or killed the run from here: nobody will hear a message; the
        box goes (once the kill's question has), saying so if it held one."""
        if self.app.screen is not self:
            self._close_on_resume = True  # once what is on top of it (the kill's question) goes
            return
        if self._text.value.strip():
            toast(self.app, "the run is stopping: nobody will hear it", title="message not sent")
        self.dismiss(None)

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

    def on_screen_resume(self) -> None:
        if self._close_on_resume:
            self.close_unsent()


def unheard(box: MessageDialog | None, ended: bool = False) -> None:
    """A run's open message box: closed when the operator stops or kills the run (ctrl+s,
    ctrl+k from it), said ended when the run ends; what it holds is never sent."""
    if box is None or box not in box.app.screen_stack:
        return
    if ended:
        box.mark_ended()
    else:
        box.close_unsent()
