"""The palette's `keys`: every key of the screen the operator was on, then the console's own,
each with its words, the ones that do nothing right now said so (and why the key line dims
them). Built from the screen's active bindings, so it is never out of date with the keys.
Textual's own help panel named widget keys by their internal words and left the console's
out."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, ClassVar

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.content import Content
from textual.dom import DOMNode
from textual.screen import ModalScreen, Screen
from textual.widgets import Static

from loopdeck.tui.shown import plain

KEYS = "[b]esc[/] back"
OFF = "not now"  # a key the screen has but that does nothing in its state
# What a screen is called in the keys' heading, by its class.
CALLED = {
    "FleetScreen": "the fleet",
    "RunScreen": "the run",
    "ReplayScreen": "the replay",
    "InboxScreen": "the inbox",
    "TranscriptScreen": "the transcript",
    "ApprovalDialog": "the approval",
    "QuestionDialog": "the question",
    "LauncherScreen": "the chooser",
}

# Textual's own keys, in the console's words (what they do here), listed after the screen's.
TEXTUALS = {
    "app.focus_next": "Next panel",
    "app.focus_previous": "Previous panel",
    "screen.copy_text": "Copy the selected text",
    "quit": "Quit: asked first while a run is live, as q",
    "command_palette": "Commands: the run's, the themes, these keys",
}
KEY_NAMES = {"⏎": "enter", "⇥": "tab", "⇤": "shift+tab", "␣": "space", "↑": "up", "↓": "down"}

Key = tuple[str, str, bool]  # the key as shown, its words, whether it acts now


def key_name(shown: str) -> str:
    """A key as it is typed: `ctrl+q`, `enter`, not the key line's `^q`, `⏎`."""
    if shown.startswith("^") and len(shown) > 1:
        return f"ctrl+{shown[1:]}"
    return KEY_NAMES.get(shown, shown)


def keys_of(screen: Screen[Any]) -> tuple[list[Key], list[Key]]:
    """The screen's own keys and the console's, each in the order they are bound, with its
    words; a key with no words (one Textual keeps for itself) is left out."""
    app = screen.app
    own: list[Key] = []
    console: list[Key] = []
    textuals: list[Key] = []
    seen: set[tuple[int, str]] = set()
    for node, binding, enabled in _bindings(screen):
        if not binding.description or (id(node), binding.action) in seen:
            continue
        if node is not app and node is not screen:
            continue  # a widget's own keys (a table's cursor): the widget says them
        seen.add((id(node), binding.action))
        words = TEXTUALS.get(binding.action, binding.description)
        shown = (key_name(app.get_key_display(binding)), words, enabled)
        if binding.action in TEXTUALS:
            textuals.append(shown)
        else:
            (console if node is app else own).append(shown)
    return own, console + textuals


def _bindings(screen: Screen[Any]) -> Iterator[tuple[DOMNode, Binding, bool]]:
    """The screen's active bindings; over a dialog also the app's priority keys (stop, kill,
    pause, quit), which act there though Textual's active bindings stop at the dialog."""
    for active in screen.active_bindings.values():
        yield active.node, active.binding, active.enabled
    if screen.is_modal:
        app = screen.app
        for _, binding in app._bindings:  # the app's own, as Textual keeps them
            if binding.priority and app.check_action(binding.action, ()):
                yield app, binding, True


def _lines(keys: list[Key]) -> Content:
    width = max((len(key) for key, _, _ in keys), default=0)
    lines = []
    for key, words, enabled in keys:
        said = words if enabled else f"{words} ({OFF})"
        style = "" if enabled else "$text-muted"
        lines.append(
            Content.assemble(
                plain(key.ljust(width), "bold $accent" if enabled else "bold $text-muted"),
                "  ",
                plain(said, style),
            )
        )
    return Content("\n").join(lines) if lines else plain("none", "$text-muted")


class KeysScreen(ModalScreen[None]):
    """ctrl+p, `keys`: the keys of the screen below, then the console's, in words."""

    BINDINGS = [Binding("escape", "close", "Back", id="keys.close")]
    DEFAULT_CSS: ClassVar[str] = """
    KeysScreen {
        align: center middle;
        background: $background 60%;
    }
    #keys-box {
        width: 72;
        max-width: 95%;
        height: auto;
        max-height: 90%;
        border: thick $accent;
        border-title-color: $accent;
        border-title-style: bold;
        background: $panel;
        padding: 0 2;
    }
    #keys-list {
        height: auto;
    }
    .keys-heading {
        text-style: bold;
        margin-top: 1;
    }
    #keys-keys {
        dock: bottom;
        margin-top: 1;
    }
    """

    def __init__(self, screen: Screen[Any]) -> None:
        super().__init__(classes="dialog")
        self.called = CALLED.get(type(screen).__name__, "this screen")
        self.own, self.console = keys_of(screen)

    def compose(self) -> ComposeResult:
        box = Vertical(id="keys-box")
        box.border_title = "Keys"
        with box:
            yield Static(KEYS, id="keys-keys")
            with VerticalScroll(id="keys-list"):
                yield Static(f"On {self.called}", classes="keys-heading")
                yield Static(_lines(self.own), id="keys-own")
                yield Static("Everywhere", classes="keys-heading")
                yield Static(_lines(self.console), id="keys-console")

    def action_close(self) -> None:
        self.dismiss(None)
