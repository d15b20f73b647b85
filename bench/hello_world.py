"""Textual's hello world: the reference for loopdeck's first frame (bench/start_time.py)."""

from textual.app import App, ComposeResult
from textual.widgets import Static


class Hello(App[None]):
    def compose(self) -> ComposeResult:
        yield Static("Hello, World!")


if __name__ == "__main__":
    Hello().run()
