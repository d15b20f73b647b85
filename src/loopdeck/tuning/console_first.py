"""The console's loop first: while it has work, the runs' loop waits at the start of its turn.

A console's runs run on a thread and loop of their own (`operator.run_loop`), and the two
threads share the interpreter's lock. Under a runaway both always want it, so it went to each
in turn for the switch interval (`lock_switching`): a frame that needed 8 ms of the lock took
16 or more on the clock, cut into by the run, and the keys and the next frame waited for all
of it (issue 43, "the keys never wait on the loop").

So the console's loop goes first. Its selector is watched (`watch`): from the moment it
returns (the loop has callbacks to run) until the loop selects again (it has none left), the
console's loop is awake. The runs' loop, on a selector of its own (`RunsSelector`), waits at
the start of each turn while the console's loop is awake: the lock is the console's for the
whole of its work, not for one slice of it. A run loses nothing to this: one lock is shared
either way, and the console's loop took its share of it before too, only in pieces.

The console's loop goes first from the moment it is due to wake, not from when it runs: its
selector's timeout is over, or another thread woke it (`call_soon_threadsafe`: the runs' news,
a key from Textual's input thread). Until then its thread waits for the lock, and a waiter
only asks for it once a switch interval passes with no hand-over: the runs' thread and the env
thread hand it to each other several times a millisecond, so it never asked, and a timer of
the console's fired up to 70 ms late (bench/console_load.py, zero-latency runaway: 11 selects
a run over by more than 20 ms). So a runs' turn also waits while the console's loop is due
and not yet awake (`_due_at`, written as its selector sleeps and by its `_write_to_self`).

A turn of the console's loop that takes longer than `MAX_AWAKE_S` holds the runs no further:
the lock is shared again as before (a long layout, a loop stopped while awake, never closed),
and so does a wake that is that late.
A wait is only ever that long, and the runs' loop never waits for a loop that is not watched:
only the console's, on the thread that took the console's terms (`lock_switching`), and only
a loop with asyncio's own selector (`refusal`); any other is left as it is, said once in the
log. Headless, or in an embedder's process, nothing is watched and nobody waits.
"""

from __future__ import annotations

import asyncio
import logging
import math
import selectors
import threading
import time
from collections.abc import Mapping
from typing import Any

from loopdeck.tuning import lock_switching

log = logging.getLogger(__name__)

# A turn of the console's loop takes up to ~30 ms under a runaway (a frame's fold and paint);
# one that takes longer than this shares the lock with the runs again.
MAX_AWAKE_S = 0.05

# What the console's thread writes are plain values (it never waits on a lock the runs' thread
# may hold); the event is set only when a runs' turn waits on it.
_awake = False
_awake_since = 0.0
_due_at = math.inf  # while it sleeps: when its selector returns, or when it was woken
_runs_waiting = False
_asleep = threading.Event()  # set once the console's loop sleeps, for a runs' turn waiting
_refused: set[type] = set()


def console_awake_for() -> float | None:
    """How long the console's loop has been awake (s), or None while it sleeps."""
    if not _awake:
        return None
    return time.monotonic() - _awake_since


def wait_for_console() -> None:
    """On the runs' thread, before a turn: wait while the console's loop is awake or due to
    wake, at most until it has been for MAX_AWAKE_S."""
    global _runs_waiting
    if _first_for() <= 0:
        return
    _asleep.clear()
    _runs_waiting = True
    try:
        # Asked again once the console's thread can see this turn waiting.
        if (left := _first_for()) > 0:
            _asleep.wait(left)
    finally:
        _runs_waiting = False


def _first_for() -> float:
    """How much longer the console's loop goes first (s; <= 0: it does not now)."""
    since = _awake_since if _awake else _due_at
    now = time.monotonic()
    if since > now:
        return 0.0  # asleep, and not due yet
    return since + MAX_AWAKE_S - now


def _went_to_sleep(timeout: float | None = None) -> None:
    """The console's loop selects for `timeout` s (None: until woken, or it is closed)."""
    global _awake, _due_at
    if timeout is None:
        _due_at = math.inf
    else:  # as epoll rounds it: up to the next ms
        _due_at = time.monotonic() + math.ceil(max(timeout, 0.0) * 1e3) * 1e-3
    _awake = False
    if _runs_waiting:
        _asleep.set()


def _woke() -> None:
    global _awake, _awake_since
    _awake_since = time.monotonic()
    _awake = True


def _woken() -> None:
    """Another thread wakes the console's loop (its `_write_to_self`): it is due now."""
    global _due_at
    _due_at = time.monotonic()


class _Watched(selectors.BaseSelector):
    """The console's loop's selector, told when the loop is awake: everything else is the
    selector it wraps."""

    def __init__(self, selector: selectors.BaseSelector) -> None:
        self.selector = selector

    def register(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        return self.selector.register(fileobj, events, data)

    def unregister(self, fileobj: Any) -> selectors.SelectorKey:
        return self.selector.unregister(fileobj)

    def modify(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        return self.selector.modify(fileobj, events, data)

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        _went_to_sleep(timeout)
        try:
            return self.selector.select(timeout)
        finally:
            _woke()

    def get_key(self, fileobj: Any) -> selectors.SelectorKey:
        return self.selector.get_key(fileobj)

    def get_map(self) -> Mapping[Any, selectors.SelectorKey]:
        return self.selector.get_map()

    def close(self) -> None:
        _went_to_sleep()  # nobody waits for a loop that is gone
        self.selector.close()


class RunsSelector(selectors.DefaultSelector):
    """The runs' loop's selector: each turn starts once the console's loop is asleep
    (`wait_for_console`), after the selector returns what is ready."""

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        ready: list[tuple[selectors.SelectorKey, int]] = super().select(timeout)
        wait_for_console()
        return ready


def refusal(loop: asyncio.AbstractEventLoop) -> str | None:
    """Why `loop` cannot be watched here, if it cannot."""
    if lock_switching.console_thread() != threading.get_ident():
        return "not the console's thread (no console's terms taken on it)"
    selector = getattr(loop, "_selector", None)
    if not isinstance(selector, selectors.BaseSelector):
        return f"{type(loop).__name__} keeps no selector as asyncio's loops do"
    if not callable(getattr(loop, "_write_to_self", None)):
        return f"{type(loop).__name__} is woken otherwise than asyncio's loops are"
    return None


def watch(loop: asyncio.AbstractEventLoop) -> bool:
    """The console's loop (running on this thread) goes first from now on. True if it does
    (now or already); False if `refusal` says why not (logged once a loop class)."""
    selector = getattr(loop, "_selector", None)
    if isinstance(selector, _Watched):
        return True
    reason = refusal(loop)
    if reason is not None:
        if type(loop) not in _refused:
            _refused.add(type(loop))
            log.info("the console's loop does not go first: %s", reason)
        return False
    assert isinstance(selector, selectors.BaseSelector)
    loop._selector = _Watched(selector)  # type: ignore[attr-defined]
    wake = loop._write_to_self  # type: ignore[attr-defined]

    def write_to_self() -> None:  # `call_soon_threadsafe`'s wake, on whichever thread
        _woken()
        wake()

    loop._write_to_self = write_to_self  # type: ignore[attr-defined]
    _woke()  # it is running this
    return True
