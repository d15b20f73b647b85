"""A run's events coalesced into frames: when the next frame may be drawn (the runtime shares
the event loop), which entries of a burst the transcript panel is given, and a frame drawn in
two halves (`SecondHalf`)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Self

from textual.geometry import Region
from textual.message import Message
from textual.screen import Screen
from textual.strip import Strip

from loopdeck.core.events import Event
from loopdeck.operator.transcript import Entry
from loopdeck.tui.timers import later, unless_gone

if TYPE_CHECKING:
    from textual.widget import Widget

    _Mixin = Widget
else:
    _Mixin = object  # not a DOMNode: Textual follows a widget's first DOMNode base for its CSS

FRAME_INTERVAL_S = 1 / 20
FRAME_SHARE = 1.0  # after a frame of T s the next waits >= T more: the runtime keeps half
MAX_FRAME_WAIT_S = 0.05  # ... but never more than this: the screen stays near the runtime
MIN_FRAME_WAIT_S = 0.04  # ... and never less: cheap frames come at ~25 a second, not ~100
HISTORY_FRAME_S = 0.25  # while a link reads a long history: progress, not every batch


def tail_that_fits(entries: list[Entry], height: int) -> list[Entry]:
    """The newest entries whose lines fill `height` (a title and its body's lines each, before
    wrapping): a burst's older entries would be drawn only to scroll out of sight."""
    shown: list[Entry] = []
    lines = 0
    for entry in reversed(entries):
        shown.append(entry)
        lines += 1 + (entry.body.count("\n") + 1 if entry.body else 0)
        if lines >= max(1, height):
            break
    shown.reverse()
    return shown


class FramePacer:
    """The frame timer of a run's screen: `due` draws what arrived (`flush`, which calls
    `begun` first), unless the last frame is still being paid for.

    The runtime shares this event loop. After a frame that took T seconds from folding the
    events to the painted screen, the next waits at least FRAME_SHARE x T more, so a runaway
    keeps most of the loop; the wait is capped (MAX_FRAME_WAIT_S) so the screen never falls far
    behind. While the link reads a long history (`reading_history()`), frames come every
    HISTORY_FRAME_S: the folding gets the loop. Stops, approvals and keys flush at once, never
    waiting for this.
    """

    def __init__(
        self,
        screen: Screen[None],
        buffer: list[Event],
        flush: Callable[[], None],
        reading_history: Callable[[], bool],
        second_half: SecondHalf | None = None,
    ) -> None:
        self.screen = screen
        self.second_half = second_half  # its own tick too: one owed and never asked for
        self.reading_history = reading_history
        self.buffer = buffer  # the events that arrived since the last frame
        self.flush = flush
        self._next_frame_at = 0.0
        self._timer_set = False  # a one-shot timer for a frame due between two ticks

    def due(self) -> None:
        """A tick of the frame timer (every FRAME_INTERVAL_S)."""
        if self.second_half is not None:
            self.second_half.due()
        if not self.buffer:
            return
        wait = self._next_frame_at - time.monotonic()
        if wait <= 0:
            self.flush()
        elif wait < FRAME_INTERVAL_S and not self._timer_set:
            # Due before the next tick (after a slow frame): drawn then, not a tick later.
            self._timer_set = True
            later(self.screen, wait, self._on_time)

    def _on_time(self) -> None:
        self._timer_set = False
        self.due()

    def begun(self) -> None:
        """A frame is being drawn: the next is not due before this one is painted."""
        started = time.monotonic()
        self._next_frame_at = float("inf")  # until this frame is on screen
        self.screen.call_after_refresh(self._painted, started)

    def _painted(self, started: float) -> None:
        now = time.monotonic()
        if self.reading_history():
            self._next_frame_at = now + HISTORY_FRAME_S
        else:
            wait = max(FRAME_SHARE * (now - started), MIN_FRAME_WAIT_S)
            self._next_frame_at = now + min(wait, MAX_FRAME_WAIT_S)
            if not self._timer_set:
                # The next frame is armed for when it is due, not left to the next tick of the
                # frame timer: up to a tick later, or two when a busy loop makes it skip one.
                self._timer_set = True
                later(self.screen, self._next_frame_at - now, self._on_time)


class SecondHalf:
    """What a frame of a runaway draws once its first half is on screen: the transcript's new
    entries and the Call panel (`RunScreen.flush`).

    A frame of a 160x48 run screen under a runaway repaints nearly every panel, 9-11 ms of
    Textual's screen update in one piece (p99 ~18 ms), and the keys and every timer of the
    loop waited behind it (issue 43, "the keys never wait on the loop"). Drawn in two halves,
    each paint is about half of that: the first (the header, State, Budgets, Calls) as the
    frame is folded, the second on the loop's next turn after one of the first half's panels
    is painted (`FirstHalfPanel`, `first_painted`), behind the timers due and keys in by then.
    A frame whose first half paints none of them (a narrow layout, no panel changed) has its
    second half drawn by the next frame or the frame timer's second tick after it (`due`); a
    frame that must be whole at once (a stop, an approval) draws it at once (`now`).
    """

    def __init__(
        self,
        screen: Screen[None],
        draw: Callable[[], None],
        first_half: Callable[[], Iterable[FirstHalfPanel]],
    ) -> None:
        self.screen = screen
        self.draw = draw
        self.first_half = first_half  # its panels
        self.owed = False
        self._asked = False  # drawn on the loop's next turn, asked for once
        self._ticks = 0  # of the frame timer since it was owed
        self._after: list[Callable[[], object]] = []  # called once it is painted

    def owe(self) -> None:
        self.owed = True
        self._ticks = 0

    def first_painted(self) -> None:
        """A panel of the first half was painted: once none is left to paint (Textual paints
        each as its refresh reaches the screen, not all in one update), the second half is
        drawn on the loop's next turn."""
        if self.owed and not self._asked and not any(p.unpainted for p in self.first_half()):
            self._asked = True
            # A timer, not `call_soon`: it runs after the timers due while the first half
            # was painted (`call_soon` would run it before them, in the paint's own turn).
            asyncio.get_running_loop().call_later(0, self._on_turn)

    def _on_turn(self) -> None:
        self._asked = False
        if self.screen.display:
            unless_gone(self.screen, self.now)

    def due(self) -> None:
        """A tick of the frame timer: a second half owed since the tick before and not asked
        for (its first half painted none of the panels that say so) is drawn now. Not at the
        first tick: the first half may be waiting for its paint then (a frame every tick)."""
        if self.owed and not self._asked:
            self._ticks += 1
            if self._ticks > 1:
                self.now()

    def now(self) -> None:
        """The owed second half drawn now, if any."""
        if self.owed:
            self.owed = False
            self.draw()
        for callback in self._after:
            self.screen.call_after_refresh(callback)
        self._after.clear()

    def after(self, callback: Callable[[], object]) -> None:
        """`callback` after the refresh that paints the owed second half (the next refresh if
        none is owed): a frame is on screen once its second half is."""
        self._after.append(callback)
        if not self.owed:
            self.now()


class FirstHalfPainted(Message):
    """A panel of a frame's first half was painted (`FirstHalfPanel`), told its screen."""


class FirstHalfPanel(_Mixin):
    """Mixed in before the widget class of a panel of a frame's first half: its first paint
    after a refresh tells its screen (`FirstHalfPainted`, for its `SecondHalf`) that the first
    half is on screen (a paint that only passes over it, its lines unchanged, says nothing)."""

    _refreshed = False

    @property
    def unpainted(self) -> bool:
        """Refreshed and not painted since (or not shown)."""
        return self._refreshed

    def refresh(self, *regions: Region, **how: bool) -> Self:
        self._refreshed = True
        return super().refresh(*regions, **how)

    def render_lines(self, crop: Region) -> list[Strip]:
        lines = super().render_lines(crop)
        if self._refreshed:
            self._refreshed = False
            self.screen.post_message(FirstHalfPainted())
        return lines
