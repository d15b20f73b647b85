"""The transcript on screen: a log that follows the tail until scrolled up, and search."""

from __future__ import annotations

import re
from collections.abc import Iterable

from rich.console import Group
from rich.padding import Padding
from rich.text import Text
from textual import events, on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.content import Content
from textual.geometry import Size
from textual.screen import Screen
from textual.widgets import Input, RichLog, Static

from loopdeck.operator import transcript
from loopdeck.operator.transcript import Entry, Transcript
from loopdeck.tui.in_place import grows_in_place, rescroll
from loopdeck.tui.keys_bar import KeysBar
from loopdeck.tui.paint_style import StylePerPaint
from loopdeck.tui.shown import plain
from loopdeck.tui.shown_input import ShownInput

KIND_VAR = {
    "goal": "accent",
    "plan": "primary",
    "model": "foreground",
    "decision": "secondary",
    "call": "primary",
    "approval": "warning",
    "result": "success",
    "guard": "repeat-mark",
    "review": "verdict-pass",
    "finding": "warning",
    "stop": "error",
    "note": "foreground-muted",
}


class TranscriptLog(StylePerPaint, RichLog):
    """Entries as they arrive. Scrolling up stops the follow; scrolling to the end resumes."""

    can_focus = True
    virtual_size = grows_in_place()  # new lines move the scrollbar, not the screen

    def __init__(
        self, *, id: str | None = None, classes: str | None = None, keep: int | None = None
    ) -> None:
        super().__init__(
            wrap=True,
            markup=False,
            auto_scroll=False,
            min_width=20,
            max_lines=keep,
            id=id,
            classes=classes,
        )
        self.keep = keep  # a live tail keeps its last entries only; `t` has them all
        self.query_text = ""
        self.following = True  # off when the operator scrolls up, on again at the end
        self.matches: list[int] = []
        self.match_index = -1
        self.entries: list[Entry] = []  # what it shows, oldest first

    def _style(self, kind: str) -> str:
        return self.app.theme_variables.get(KIND_VAR.get(kind, "foreground"), "")

    def _renderable(self, entry: Entry) -> Group:
        stamp = transcript.clock_text(entry.at)
        title = Text.assemble(
            (f"{stamp} ", "dim"), (entry.title, f"bold {self._style(entry.kind)}")
        )
        parts: list[Text | Padding] = [title]
        if entry.body:
            parts.append(Padding(Text(entry.body), (0, 0, 0, 2)))
        if self.query_text:
            pattern = re.compile(re.escape(self.query_text), re.IGNORECASE)
            for part in parts:
                text = part.renderable if isinstance(part, Padding) else part
                assert isinstance(text, Text)
                text.highlight_regex(pattern, "reverse bold")
        return Group(*parts)

    def add(self, entries: Iterable[Entry]) -> None:
        # One write for all of them: a write measures, renders, re-slices the kept lines and
        # scrolls, and a frame of a runaway brings a dozen entries.
        added = list(entries)
        if not added:
            return
        self.entries.extend(added)
        self.write(Group(*map(self._renderable, added)), scroll_end=self.following)
        if self.keep is not None and len(self.entries) > 2 * self.keep:
            del self.entries[: -self.keep]

    def show_only(self, entries: Iterable[Entry]) -> None:
        """These entries and nothing before them."""
        self.clear()
        self.entries = []
        self.add(entries)

    def show_tail(self, entries: list[Entry]) -> None:
        """The last lines of these entries, as many as the log is tall, and nothing before them
        (the entries fill its height: `tail_that_fits`). The log keeps the same number of
        lines frame after frame, so its size stays put and the screen needs no layout pass
        (`show_only` empties it first, which asks for one every frame of a runaway)."""
        kept, self.max_lines = self.max_lines, max(1, self.size.height)
        try:
            self.entries = []
            self.add(entries)
        finally:
            self.max_lines = kept

    def watch_virtual_size(self, size: Size) -> None:
        rescroll(self, size)

    def watch_scroll_y(self, old_value: float, new_value: float) -> None:
        super().watch_scroll_y(old_value, new_value)
        if new_value >= self.max_scroll_y:
            self.following = True

    def on_mouse_scroll_up(self, event: events.MouseScrollUp) -> None:
        self.following = False

    def action_scroll_up(self) -> None:
        self.following = False
        super().action_scroll_up()

    def action_page_up(self) -> None:
        self.following = False
        super().action_page_up()

    def action_scroll_home(self) -> None:
        self.following = False
        super().action_scroll_home()

    def load(self, transcript: Transcript) -> None:
        self.clear()
        self.entries = []
        if transcript.dropped:
            note = f"… {transcript.dropped:,} earlier entries not kept here (see `loopdeck export`)"
            self.write(Text(note, style="dim"))
        self.add(transcript.entries)
        self.scroll_end(animate=False, immediate=True)

    def search(self, text: str) -> int:
        """Highlight `text` everywhere and go to its first match; the number of matching lines."""
        self.query_text = text.strip()
        entries, self.entries = self.entries, []
        self.clear()
        self.following = False
        self.add(entries)
        self.matches, self.match_index = [], -1
        return self.next_match(1)

    def _find(self) -> None:
        needle = self.query_text.lower()
        self.matches = [i for i, line in enumerate(self.lines) if needle in line.text.lower()]

    def next_match(self, delta: int) -> int:
        if not self.query_text:
            return 0
        self._find()
        if not self.matches:
            return 0
        self.match_index = (self.match_index + delta) % len(self.matches)
        self.scroll_to(y=max(0, self.matches[self.match_index] - 2), animate=False, immediate=True)
        return len(self.matches)


class TranscriptScreen(Screen[None]):
    """`t` from the run screen: the whole transcript, live, scrollable and searchable."""

    BINDINGS = [
        Binding("escape,t", "close", "Back to the run", id="transcript.close"),
        Binding("slash", "search", "Search", id="transcript.search"),
        Binding("n", "match(1)", "Next match", id="transcript.next"),
        Binding("N", "match(-1)", "Prev match", id="transcript.prev"),
        Binding("end", "follow", "Follow", id="transcript.follow"),
    ]

    def __init__(self, transcript: Transcript, title: Content) -> None:
        super().__init__()
        self.transcript = transcript
        self.title_text = title

    def compose(self) -> ComposeResult:
        yield Static(id="transcript-title")
        yield TranscriptLog(id="transcript-log", classes="panel")
        yield ShownInput(placeholder="search the transcript, enter to find", id="transcript-search")
        yield KeysBar()

    def on_mount(self) -> None:
        self.query_one("#transcript-title", Static).update(self.title_text)
        self.query_one("#transcript-search").display = False
        log = self.query_one(TranscriptLog)
        log.border_title = "Transcript"
        log.load(self.transcript)
        log.focus()

    def add(self, entries: list[Entry]) -> None:
        if entries:
            self.query_one(TranscriptLog).add(entries)

    def action_close(self) -> None:
        self.dismiss(None)

    def action_search(self) -> None:
        search = self.query_one("#transcript-search", Input)
        search.display = True
        search.focus()

    @on(Input.Submitted, "#transcript-search")
    def _searched(self, event: Input.Submitted) -> None:
        log = self.query_one(TranscriptLog)
        found = log.search(event.value)
        self._say(found, event.value)
        event.input.display = False
        log.focus()

    def action_match(self, delta: int) -> None:
        log = self.query_one(TranscriptLog)
        self._say(log.next_match(delta), log.query_text)

    def _say(self, found: int, text: str) -> None:
        log = self.query_one(TranscriptLog)
        if not text.strip():
            log.border_subtitle = ""
        elif found:
            log.border_subtitle = plain(
                f"“{text}” · match {log.match_index + 1} of {found} · n / N"
            )
        else:
            log.border_subtitle = plain(f"“{text}” · no match")

    def action_follow(self) -> None:
        self.query_one(TranscriptLog).scroll_end(animate=False)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        return not (action in ("match", "search") and isinstance(self.focused, Input))
