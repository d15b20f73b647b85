"""The console's first frame while a run is prepared behind it (imports, store, env, model).

Light on purpose: Textual and the keys line only. `q` leaves at once; nothing has started.
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.content import Content
from textual.screen import Screen
from textual.widgets import Static

from loopdeck.tui.keys_bar import KeysBar
from loopdeck.tui.shown import markup


class PreparingScreen(Screen[None]):
    DEFAULT_CSS = """
    PreparingScreen {
        align: center middle;
    }
    PreparingScreen #preparing {
        width: auto;
        max-width: 90%;
        padding: 1 2;
        border: round $primary;
        color: $foreground;
    }
    """

    def __init__(self, what: str) -> None:
        super().__init__()
        self.what = what

    def compose(self) -> ComposeResult:
        yield Static(self._text("the env, the model, the store…"), id="preparing")
        yield KeysBar()

    def _text(self, doing: str) -> Content:
        about = " · $what" if self.what else ""
        return markup(
            f"[b]loopdeck[/b]{about}\n[dim]preparing the run: $doing[/]",
            what=self.what,
            doing=doing,
        )

    def phase(self, doing: str) -> None:
        """What the preparation waits for now (an MCP server starting), in words."""
        self.query_one("#preparing", Static).update(self._text(doing))
