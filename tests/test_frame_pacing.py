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


def pacer_on(screen: Screen, frames: list[int]) -> tuple[FramePacer, list[int]]:
    buffer: list[int] = []

    def flush() -> None:
        pacer.begun()
        frames.append(len(buffer))
        buffer.clear()

    pacer = FramePacer(screen, buffer, flush, lambda: False)  # type: ignore[arg-type]
    return pacer, buffer


@pytest.mark.parametrize("lost", [False, True])
def test_frames_go_on_whether_or_not_a_frames_paint_is_said(
    lost: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = Clock()
    monkeypatch.setattr(f"{frame_pacing.__name__}.time.monotonic", clock)
    screen, frames = Screen(loses_callbacks=lost), list[int]()
    pacer, buffer = pacer_on(screen, frames)
    buffer.append(1)
    pacer.due()
    assert frames == [1]  # the first frame drawn at once
    buffer.append(2)
    clock.now += 0.01
    pacer.due()
    assert frames == [1]  # not before the first is painted
    for said in screen.after_refresh:  # painted, and said so (unless lost)
        said()
    clock.now += MAX_FRAME_WAIT_S + 0.001
    pacer.due()
    if lost:  # its paint never said: still waiting, until LOST_PAINT_S has passed
        assert frames == [1]
        clock.now += LOST_PAINT_S
        pacer.due()  # taken as painted: the next frame armed for when it is due
        clock.now += MAX_FRAME_WAIT_S + 0.001
        pacer.due()
    assert frames == [1, 1]


def test_an_earlier_frames_paint_said_late_does_not_arm_the_next_frame(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = Clock()
    monkeypatch.setattr(f"{frame_pacing.__name__}.time.monotonic", clock)
    screen, frames = Screen(loses_callbacks=False), list[int]()
    pacer, buffer = pacer_on(screen, frames)
    buffer.append(1)
    pacer.due()
    late = screen.after_refresh.pop()  # the first frame's paint, not said yet
    clock.now += LOST_PAINT_S + 0.1
    buffer.append(2)
    pacer.due()  # taken as painted
    clock.now += MAX_FRAME_WAIT_S + 0.001
    pacer.due()
    assert frames == [1, 1]  # the second frame began, its paint not said yet
    late()  # the first frame's paint, said now: the second is still being drawn
    buffer.append(3)
    clock.now += MAX_FRAME_WAIT_S + 0.001
    pacer.due()
    assert frames == [1, 1]
