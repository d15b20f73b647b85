"""The console's loop goes first (`loopdeck.tuning.console_first`): while it is awake the runs'
loop waits at the start of its turn, never longer than MAX_AWAKE_S, and only for a console's
loop that was watched on the console's thread."""

from __future__ import annotations

import asyncio
import sys
import threading
from collections.abc import Iterator

import pytest

from loopdeck.operator import run_loop
from loopdeck.tuning import console_first, lock_switching


@pytest.fixture
def terms() -> Iterator[None]:
    """Starts headless with nobody watched; gives back the terms the process had."""
    interval, console = sys.getswitchinterval(), lock_switching.console_thread()
    lock_switching.headless()
    console_first._went_to_sleep()
    yield
    console_first._went_to_sleep()
    lock_switching.headless()
    if console is not None:
        lock_switching.for_console()  # consoles in this process ran on this thread
    sys.setswitchinterval(interval)


class SeenWaiting(threading.Event):
    """The console's flag, telling when a runs' turn has begun to wait on it."""

    def __init__(self) -> None:
        super().__init__()
        self.waiting = threading.Event()

    def wait(self, timeout: float | None = None) -> bool:
        self.waiting.set()
        return super().wait(timeout)


async def test_a_runs_turn_waits_until_the_console_s_loop_sleeps(
    terms: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(console_first, "MAX_AWAKE_S", 600.0)  # only the sleep releases it
    flag = SeenWaiting()
    monkeypatch.setattr(console_first, "_asleep", flag)
    lock_switching.for_console()
    assert console_first.watch(asyncio.get_running_loop())
    assert console_first.console_awake_for() is not None  # this callback is running
    order: list[str] = []
    turn = threading.Thread(
        target=lambda: (console_first.wait_for_console(), order.append("runs' turn"))
    )
    turn.start()
    assert flag.waiting.wait(30)  # the runs' turn waits on the console, still awake here
    order.append("the console's work")
    while turn.is_alive():  # the loop selects: asleep, the turn goes on
        await asyncio.sleep(0.001)
    assert order == ["the console's work", "runs' turn"]


async def test_a_console_awake_longer_than_the_bound_holds_nobody(
    terms: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(console_first, "MAX_AWAKE_S", 0.0)
    lock_switching.for_console()
    assert console_first.watch(asyncio.get_running_loop())
    assert console_first.console_awake_for() is not None
    turn = threading.Thread(target=console_first.wait_for_console)
    turn.start()
    turn.join()  # it did not wait for this callback to end: it ended before


def test_only_the_console_s_thread_is_watched_and_a_closed_loop_holds_nobody(
    terms: None,
) -> None:
    loop = asyncio.new_event_loop()
    try:
        assert not console_first.watch(loop)  # headless: no console's terms taken
        assert console_first.console_awake_for() is None
        lock_switching.for_console()
        assert console_first.watch(loop)
        assert console_first.watch(loop)  # once: watched already
        assert console_first.console_awake_for() is not None
    finally:
        loop.close()
    assert console_first.console_awake_for() is None
    console_first.wait_for_console()  # returns at once


def test_a_loop_without_asyncio_s_selector_is_refused(terms: None) -> None:
    class OtherLoop(asyncio.AbstractEventLoop):
        pass

    lock_switching.for_console()
    other = OtherLoop()
    assert console_first.refusal(other) == "OtherLoop keeps no selector as asyncio's loops do"
    assert not console_first.watch(other)
    assert console_first.console_awake_for() is None


async def test_a_run_started_from_the_console_s_loop_makes_it_go_first(terms: None) -> None:
    async def where() -> bool:
        return run_loop.on_runs_loop()

    assert await run_loop.run(where())
    assert console_first.console_awake_for() is None  # headless: nothing watched
    lock_switching.for_console()
    assert await run_loop.run(where())
    assert console_first.console_awake_for() is not None  # this loop, awake here


def _runs_turn_after(flag: SeenWaiting, order: list[str]) -> threading.Thread:
    """A runs' turn on a thread of its own, started once the console's state is set."""
    turn = threading.Thread(
        target=lambda: (console_first.wait_for_console(), order.append("runs' turn"))
    )
    turn.start()
    assert flag.waiting.wait(30)  # it waits on the console's loop
    return turn


def test_a_console_s_loop_due_to_wake_goes_first_before_it_runs(
    terms: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Its selector's timeout is over: its thread waits for the interpreter's lock, and a turn
    # that started now would keep it (the runs' and env threads hand it to each other).
    monkeypatch.setattr(console_first, "MAX_AWAKE_S", 600.0)  # only the sleep releases it
    flag = SeenWaiting()
    monkeypatch.setattr(console_first, "_asleep", flag)
    console_first._went_to_sleep(600.0)
    console_first.wait_for_console()  # not due for ten minutes: no wait
    console_first._went_to_sleep(0.0)  # due at once
    order: list[str] = []
    turn = _runs_turn_after(flag, order)
    order.append("the console's work")
    console_first._went_to_sleep(600.0)
    turn.join()
    assert order == ["the console's work", "runs' turn"]


def test_a_console_s_loop_woken_by_another_thread_goes_first(
    terms: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(console_first, "MAX_AWAKE_S", 600.0)
    flag = SeenWaiting()
    monkeypatch.setattr(console_first, "_asleep", flag)
    loop = asyncio.new_event_loop()
    try:
        lock_switching.for_console()
        assert console_first.watch(loop)
        console_first._went_to_sleep(600.0)  # as its selector sleeps
        console_first.wait_for_console()  # asleep, and not due: no wait
        order: list[str] = []
        # `call_soon_threadsafe` wakes it, as the runs' news and Textual's keys do.
        waker = threading.Thread(target=loop.call_soon_threadsafe, args=(order.append, "x"))
        waker.start()
        waker.join()
        turn = _runs_turn_after(flag, order)
        assert order == []
        console_first._went_to_sleep(600.0)  # its woken turn is over
        turn.join()
        assert order == ["runs' turn"]
    finally:
        loop.close()
