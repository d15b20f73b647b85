"""The transcript on screen: a log that follows the tail until scrolled up, and search.

The run screen's side panel is a live tail (`keep` lines): while it follows, a frame's burst
taller than the panel is drawn only from the entries that fill it (`tail_that_fits`), the
newest lines replacing what it showed; a runaway's frame brings ten times the lines the panel
shows, each measured and wrapped only to scroll out of sight. The entries are kept, and drawn
all (as many as it keeps) the moment the operator scrolls back (`caught_up`). `t`'s screen
keeps everything and draws every entry as it comes."""

from __future__ import annotations

import re
from collections.abc import Iterable

from rich.cells import cell_len
from rich.console import Group
from rich.padding import Padding
from rich.text import Text
from textual import events, on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.content import Content
from textual.geometry import Size
from textual.screen import Screen
from textual.strip import Strip
from textual.widgets import Input, RichLog, Static

from loopdeck.operator import transcript
from loopdeck.operator.transcript import Entry, Transcript
from loopdeck.tui.in_place import grows_in_place, rescroll
from loopdeck.tui.keys_bar import KeysBar
from loopdeck.tui.paint_style import StylePerPaint
from loopdeck.tui.shown import plain
from loopdeck.tui.shown_input import ShownInput


def tail_that_fits(entries: list[Entry], height: int) -> list[Entry]:
    """The newest entries whose lines fill `height` (a title and its body's lines each, before
    wrapping, which only adds lines): the older ones would be drawn only to scroll away."""
    shown: list[Entry] = []
    lines = 0
    for entry in reversed(entries):
        shown.append(entry)
        lines += _lines(entry)
        if lines >= max(1, height):
            break
    shown.reverse()
    return shown


def _lines(entry: Entry) -> int:
    """An entry's lines before wrapping: its title, then its body's."""
    return 1 + (entry.body.count("\n") + 1 if entry.body else 0)


def _wrapped(entry: Entry, width: int) -> int:
    """About the lines an entry takes wrapped in `width` columns (a word wrap takes more)."""
    body = entry.body.split("\n") if entry.body else []
    lines = -(-cell_len(entry.title) // max(1, width - 9))  # after its time of day
    return lines + sum(max(1, -(-cell_len(line) // max(1, width - 2))) for line in body)


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
        self.behind = False  # only a tail of `entries` drawn (`caught_up` draws them all)

    def _style(self, kind: str) -> str:
        return self.app.theme_variables.get(KIND_VAR.get(kind, "foreground"), "")

    def _renderable(self, entry: Entry) -> Group:
        stamp = transcript.clock_text(entry.at)
        title = Text.assemble(
            (f"{stamp} ", "dim"), (entry.title, f"bold {self._style(entry.kind)}")
        )
        self._mark(title)
        return Group(title, self._body(entry.body)) if entry.body else Group(title)

    def _body(self, body: str) -> Padding:
        """An entry's body (or its last lines) as drawn: indented, the search's matches marked."""
        text = Text(body)
        self._mark(text)
        return Padding(text, (0, 0, 0, 2))

    def _mark(self, text: Text) -> None:
        if self.query_text:
            pattern = re.compile(re.escape(self.query_text), re.IGNORECASE)
            text.highlight_regex(pattern, "reverse bold")

    def add(self, entries: Iterable[Entry]) -> None:
        """New entries at the end. A live tail given more than it shows draws only what fits:
        the panel's height while it follows, else the lines it keeps."""
        added = list(entries)
        if not added:
            return
        self.entries.extend(added)
        if self.keep is not None and len(self.entries) > 2 * self.keep:
            del self.entries[: -self.keep]
        if self.keep is None:
            self._write(added)
        elif self.following and self.size.height:
            tail = tail_that_fits(added, self.size.height)
            if len(tail) < len(added):
                self._show_tail(tail, self.keep)
            else:
                self._write(added)
        else:
            self._write_below(tail_that_fits(added, self.keep))

    def _write(self, entries: list[Entry], scroll: bool | None = None) -> None:
        # One write for all of them: a write measures, renders, re-slices the kept lines and
        # scrolls, and a frame of a runaway brings a dozen entries.
        follow = self.following if scroll is None else scroll
        self.write(Group(*map(self._renderable, entries)), scroll_end=follow)

    def _write_below(self, entries: list[Entry]) -> None:
        """Written below what the operator reads, scrolled back: the lines it keeps no more
        are taken from the top, and the view goes up by as many (what it showed stays put)."""
        start = self._start_line
        self._write(entries)
        trimmed = self._start_line - start
        if trimmed:
            self.scroll_to(y=max(0, self.scroll_y - trimmed), animate=False, immediate=True)

    def _show_tail(self, entries: list[Entry], keep: int) -> None:
        """The lines of these entries at the end, blank lines above them standing for the kept
        entries not drawn: the scrollbar shows the length it would with all of them, and the
        log's size changes only as it would have (a size that changes asks for a layout pass
        of the whole screen). The blank lines are never seen: the view is at the end, and
        leaving it draws them (`watch_scroll_y`)."""
        width = max(self.min_width, self.scrollable_content_region.width)
        length = max(self._length(width, keep), self.size.height)
        self.lines = [Strip.blank(width)] * length
        self._line_cache.clear()  # its lines are cached by number, and every number is new
        kept, self.max_lines = self.max_lines, length
        try:
            self.write(Group(*self._cut(entries, self.size.height)), scroll_end=True)
        finally:
            self.max_lines = kept
        self.scroll_end(animate=False, immediate=True, x_axis=False)  # never a blank line shown
        self.behind = True

    def _cut(self, entries: list[Entry], rows: int) -> list[Group | Padding]:
        """These entries as drawn, but of the first only the body's lines the `rows` need (a
        long result's top would be drawn above the view): each line wraps alone, so the rows
        shown are the same."""
        first, rest = entries[0], [self._renderable(entry) for entry in entries[1:]]
        need = rows - sum(map(_lines, entries[1:]))
        body = first.body.split("\n") if first.body else []
        if 0 < need <= len(body):
            return [self._body("\n".join(body[-need:])), *rest]
        return [self._renderable(first), *rest]

    def _length(self, width: int, keep: int) -> int:
        """About the lines the entries kept take drawn, up to `keep` (the lines it keeps). An
        entry takes a line at least: with `keep` entries or more, that is `keep`, and no entry
        is made or measured for it (a runaway's frame brings hundreds, shown or not)."""
        if len(self.entries) >= keep:
            return keep
        lines = 0
        for entry in reversed(self.entries):
            lines += _wrapped(entry, width)
            if lines >= keep:
                return keep
        return lines

    def caught_up(self) -> None:
        """Every entry kept drawn (after tails drawn alone), the view as far from the end as it
        was: what the operator scrolls back through."""
        if not self.behind or self.keep is None:
            return
        self.behind = False
        from_end = self.max_scroll_y - self.scroll_y
        self.lines = []
        self._line_cache.clear()
        self._write(tail_that_fits(self.entries, self.keep), scroll=False)
        self.scroll_to(y=max(0, self.max_scroll_y - from_end), animate=False, immediate=True)

    def _stop_following(self) -> None:
        self.caught_up()
        self.following = False

    @on(events.Resize)
    def _resized(self) -> None:
        if self.behind and self.keep is not None and self.size.height:
            # The tail again, for the height it has now: a taller panel shows more of it.
            self._show_tail(tail_that_fits(self.entries, self.size.height), self.keep)

    def watch_virtual_size(self, size: Size) -> None:
        rescroll(self, size)

    def watch_scroll_y(self, old_value: float, new_value: float) -> None:
        super().watch_scroll_y(old_value, new_value)
        if new_value >= self.max_scroll_y:
            self.following = True
        else:  # scrolled back however (a key, the wheel, dragging the scrollbar)
            self._stop_following()

    def on_mouse_scroll_up(self, event: events.MouseScrollUp) -> None:
        self._stop_following()

    def action_scroll_up(self) -> None:
        self._stop_following()
        super().action_scroll_up()

    def action_page_up(self) -> None:
        self._stop_following()
        super().action_page_up()

    def action_scroll_home(self) -> None:
        self._stop_following()
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
