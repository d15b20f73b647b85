"""A tool's timeout on the env thread (`EnvThread.call(timeout_s=...)`): it bounds the whole
call as `bounded` around it did, the wait for env code started before it included, and arms no
timer for a call whose code is done within the loop's quick wait (issue 43)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from loopdeck.core import env_thread
from loopdeck.core.env_thread import EnvThread


@pytest.fixture
def timers(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The deadline of every timer the env thread armed for a call (`asyncio.timeout_at`)."""
    armed: list[float] = []
    original = asyncio.timeout_at

    def recording(when: float | None) -> Any:
        assert when is not None
        armed.append(when)
        return original(when)

    monkeypatch.setattr(env_thread.asyncio, "timeout_at", recording)
    return armed


async def test_a_call_done_within_the_quick_wait_arms_no_timer(timers) -> None:
    thread = EnvThread()
    thread.quick_wait_s = 30.0  # long enough for any loaded machine: the quick path is certain
    try:
        for i in range(20):
            assert await thread.call("tool", lambda i=i: i, timeout_s=5.0) == i
    finally:
        thread.close()
    assert timers == []


async def test_a_call_past_its_timeout_is_a_timeout_and_its_code_a_stray(timers) -> None:
    thread = EnvThread(stray_wait_s=30)
    thread.quick_wait_s = 0.0  # the result comes through the loop: the timer is armed
    release = threading.Event()
    try:
        loop = asyncio.get_running_loop()
        before = loop.time()
        with pytest.raises(TimeoutError):
            await thread.call("tool slow", lambda: release.wait(30), timeout_s=0.05)
        assert len(timers) == 1 and before + 0.05 <= timers[0] <= loop.time()
        assert thread.stray is not None and thread.stray.startswith("tool slow")
        release.set()
        # the next call waits for the stray to end, then runs
        assert await thread.call("next", lambda: "next", timeout_s=5.0) == "next"
        assert thread.stray is None
    finally:
        release.set()
        thread.close()


async def test_the_timeout_bounds_the_wait_for_a_stray_started_before() -> None:
    """A call behind a stray (a call nobody waits for any more, still running) times out at
    its own bound, not at the stray's (`stray_wait_s`)."""
    thread = EnvThread(stray_wait_s=30)
    release = threading.Event()
    try:
        stuck = asyncio.create_task(thread.call("stuck", lambda: release.wait(30)))
        await asyncio.sleep(0)
        stuck.cancel()
        with pytest.raises(asyncio.CancelledError):
            await stuck
        ran: list[str] = []
        with pytest.raises(TimeoutError):
            await thread.call("tool", lambda: ran.append("tool"), timeout_s=0.05)
        release.set()
        assert await thread.call("next", lambda: "next") == "next"
        assert ran == []  # the call that timed out while it waited never ran
    finally:
        release.set()
        thread.close()


async def test_a_call_behind_a_then_still_running_is_bounded_too() -> None:
    """A `then` nobody took, still running, is waited for like a stray: within the timeout."""
    thread = EnvThread(stray_wait_s=30)
    release = threading.Event()
    try:
        assert await thread.call("tool", lambda: 1, then=("snapshot", lambda: release.wait(30)))
        with pytest.raises(TimeoutError):
            await thread.call("tool", lambda: 2, timeout_s=0.05)
        release.set()
        assert await thread.call("tool", lambda: 3, timeout_s=5.0) == 3
    finally:
        release.set()
        thread.close()
