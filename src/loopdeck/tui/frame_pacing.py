"""A run's events coalesced into frames: when the next frame may be drawn (the runtime shares
the interpreter's lock with the console's loop)."""

from __future__ import annotations

import time
from collections.abc import Callable

from textual.screen import Screen

from loopdeck.core.events import Event
from loopdeck.tui.timers import later

FRAME_INTERVAL_S = 1 / 20
FRAME_SHARE = 1.0  # after a frame of T s the next waits >= T more: the runtime keeps half
MAX_FRAME_WAIT_S = 0.05  # ... but never more than this: the screen stays near the runtime
MIN_FRAME_WAIT_S = 0.04  # ... and never less: cheap frames come at ~25 a second, not ~100
HISTORY_FRAME_S = 0.25  # while a link reads a long history: progress, not every batch
# A frame whose paint was never said: Textual hands a `call_after_refresh` to the screen on top
# when its message is read (a dialog pushed as the frame began), and a screen popped before it
# is idle never runs it. Past this, the frame is taken as painted and the next one drawn.
LOST_PAINT_S = 0.5


class FramePacer:
    """The frame timer of a run's screen: `due` draws what arrived (`flush`, which calls
    `begun` first), unless the last frame is still being paid for.

    The runtime shares the interpreter's lock with this loop (its own loop runs on a thread of
    its own: `operator/run_loop.py`). After a frame that took T seconds from folding the
    events until Textual runs the frame's `call_after_refresh` (the fold and the refreshes it
    asked for; the compositor's paint comes next, 5-15 ms more in a runaway, and is not in
    T), the next waits at least FRAME_SHARE x T more, so a runaway keeps most of the loop; the
    wait is capped (MAX_FRAME_WAIT_S) so the screen never falls far behind. While the link
    reads a long history (`reading_history()`), frames come every
    HISTORY_FRAME_S: the folding gets the loop. Stops, approvals and keys flush at once, never
    waiting for this.
    """

    def __init__(
        self,
        screen: Screen[None],
        buffer: list[Event],
        flush: Callable[[], None],
        reading_history: Callable[[], bool],
    ) -> None:
        self.screen = screen
        self.reading_history = reading_history
        self.buffer = buffer  # the events that arrived since the last frame
        self.flush = flush
        self._next_frame_at = 0.0
        self._begun_at = 0.0  # when the frame being drawn began
        self._timer_set = False  # a one-shot timer for a frame due between two ticks

    def due(self) -> None:
        """A tick of the frame timer (every FRAME_INTERVAL_S)."""
        if not self.buffer:
            return
        now = time.monotonic()
        if self._next_frame_at == float("inf") and now - self._begun_at > LOST_PAINT_S:
            self._painted(self._begun_at)  # its paint was never said (LOST_PAINT_S)
        wait = self._next_frame_at - now
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
        started = self._begun_at = time.monotonic()
        self._next_frame_at = float("inf")  # until this frame is on screen (or LOST_PAINT_S)
        self.screen.call_after_refresh(self._painted, started)

    def _painted(self, started: float) -> None:
        if started != self._begun_at:
            return  # an earlier frame's paint, said after the next frame began
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
