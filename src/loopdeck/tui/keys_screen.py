"""The palette's `keys`: every key of the screen the operator was on, then the console's own,
then those of the panel that has the focus (a list's ↑↓, pgup/pgdn, home/end), each key
once with its words, the ones that do nothing right now said so (and why the key line dims
them). Built from the screen's active bindings, so it is never out of date with the keys;
a list longer than the box scrolls. Textual's own help panel named widget keys by their
internal words and left the console's out."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, ClassVar, NamedTuple

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.content import Content
from textual.dom import DOMNode
from textual.screen import ModalScreen, Screen
from textual.widgets import Static

from loopdeck.tui.shown import plain
from loopdeck.tui.shown_input import typing_into

KEYS = "[b]esc[/] back"
SCROLL_KEYS = "[b]esc[/] back   [b]↑↓[/] [b]pgup[/] [b]pgdn[/] [b]home[/] [b]end[/] scroll"
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
    "MessageDialog": "the message box",
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
# A panel's sideways scrolling: no panel of the console is wider than its box.
SIDEWAYS = {"scroll_left", "scroll_right", "page_left", "page_right"}
KEY_NAMES = {"⏎": "enter", "⇥": "tab", "⇤": "shift+tab", "␣": "space", "↑": "up", "↓": "down"}

Key = tuple[str, str, bool]  # the key as shown, its words, whether it acts now


def key_name(shown: str) -> str:
    """A key as it is typed: `ctrl+q`, `enter`, not the key line's `^q`, `⏎`."""
    if shown.startswith("^") and len(shown) > 1:
        return f"ctrl+{shown[1:]}"
    return KEY_NAMES.get(shown, shown)


class Keys(NamedTuple):
    own: list[Key]  # the screen's
    console: list[Key]  # the app's and Textual's, everywhere
    panel: list[Key]  # the focused panel's (a list's cursor), listed last


def keys_of(screen: Screen[Any]) -> Keys:
    """The screen's own keys, the console's and the focused panel's, each in the order they
    are bound, with its words, each key once (the first bound, the one that acts); a key with
    no words (one Textual keeps for itself) is left out, and so are a text box's editing
    keys."""
    app = screen.app
    own: list[Key] = []
    panel: list[Key] = []
    console: list[Key] = []
    textuals: list[Key] = []
    seen: set[tuple[int, str]] = set()
    for node, binding, enabled in _bindings(screen):
        key = key_name(app.get_key_display(binding))
        if not binding.description or binding.action in SIDEWAYS:
            continue
        if {(id(node), key), (id(node), binding.action)} & seen:
            continue
        if node is not app and node is not screen and typing_into(node):
            continue  # a text box's editing keys: the key line says how typing works
        seen |= {(id(node), key), (id(node), binding.action)}
        words = TEXTUALS.get(binding.action, binding.description)
        shown = (key, words, enabled)
        if binding.action in TEXTUALS:
            textuals.append(shown)
        elif node is app:
            console.append(shown)
        else:
            (own if node is screen else panel).append(shown)
    return Keys(own, console + textuals, panel)


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
    AUTO_FOCUS = "#keys-list"  # the arrows, pgup/pgdn, home/end scroll a list longer than the box
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
        max-height: 100%;
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
        self.own, self.console, self.panel = keys_of(screen)

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
                if self.panel:
                    yield Static("In the focused list", classes="keys-heading")
                    yield Static(_lines(self.panel), id="keys-panel")

    def on_resize(self) -> None:
        self.call_after_refresh(self._said_scrolls)

    def _said_scrolls(self) -> None:
        scrolls = self.query_one("#keys-list", VerticalScroll).max_scroll_y > 0
        self.query_one("#keys-keys", Static).update(SCROLL_KEYS if scrolls else KEYS)

    def action_close(self) -> None:
        self.dismiss(None)
