"""The run screen's frame pacer: a frame whose paint is never said (its `call_after_refresh`
handed by Textual to a dialog's screen, popped before it ran it) does not stop the frames."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from loopdeck.tui import frame_pacing
from loopdeck.tui.frame_pacing import LOST_PAINT_S, MAX_FRAME_WAIT_S, FramePacer


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Screen:
    """What the pacer asks of its screen: after-refresh callbacks (kept, or lost as a popped
    dialog loses them) and one-shot timers (kept, fired by the test)."""

    display = True

    def __init__(self, loses_callbacks: bool) -> None:
        self.loses_callbacks = loses_callbacks
        self.after_refresh: list[Callable[[], None]] = []
        self.timers: list[Callable[[], None]] = []

    def call_after_refresh(self, callback: Callable[..., None], *args: Any) -> bool:
        if not self.loses_callbacks:
            self.after_refresh.append(lambda: callback(*args))
        return True

    def set_timer(self, seconds: float, callback: Callable[[], None]) -> None:
        self.timers.append(callback)


class Paced:
    """A pacer on a `Screen`, its clock the test's, and the frames it drew (events each)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, loses_callbacks: bool) -> None:
        self.clock = Clock()
        monkeypatch.setattr(f"{frame_pacing.__name__}.time.monotonic", self.clock)
        self.screen = Screen(loses_callbacks)
        self.frames: list[int] = []
        self.buffer: list[int] = []
        self.pacer = FramePacer(self.screen, self.buffer, self._flush, lambda: False)  # type: ignore[arg-type]

    def _flush(self) -> None:
        self.pacer.begun()
        self.frames.append(len(self.buffer))
        self.buffer.clear()

    def tick_after(self, seconds: float, event: int | None = None) -> None:
        """`seconds` later, maybe an event arrived, and the frame timer ticks."""
        self.clock.now += seconds
        if event is not None:
            self.buffer.append(event)
        self.pacer.due()


@pytest.mark.parametrize("lost", [False, True])
def test_frames_go_on_whether_or_not_a_frames_paint_is_said(
    lost: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    paced = Paced(monkeypatch, loses_callbacks=lost)
    paced.tick_after(0, event=1)
    assert paced.frames == [1]  # the first frame drawn at once
    paced.tick_after(0.01, event=2)
    assert paced.frames == [1]  # not before the first is painted
    for said in paced.screen.after_refresh:  # painted, and said so (unless lost)
        said()
    paced.tick_after(MAX_FRAME_WAIT_S + 0.001)
    if lost:  # its paint never said: still waiting, until LOST_PAINT_S has passed
        assert paced.frames == [1]
        paced.tick_after(LOST_PAINT_S)  # taken as painted: the next frame armed for its time
        paced.tick_after(MAX_FRAME_WAIT_S + 0.001)
    assert paced.frames == [1, 1]


def test_an_earlier_frames_paint_said_late_does_not_arm_the_next_frame(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    paced = Paced(monkeypatch, loses_callbacks=False)
    paced.tick_after(0, event=1)
    late = paced.screen.after_refresh.pop()  # the first frame's paint, not said yet
    paced.tick_after(LOST_PAINT_S + 0.1, event=2)  # taken as painted
    paced.tick_after(MAX_FRAME_WAIT_S + 0.001)
    assert paced.frames == [1, 1]  # the second frame began, its paint not said yet
    late()  # the first frame's paint, said now: the second is still being drawn
    paced.tick_after(MAX_FRAME_WAIT_S + 0.001, event=3)
    assert paced.frames == [1, 1]
