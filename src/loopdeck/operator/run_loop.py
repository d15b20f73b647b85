"""Where this process's own runs run: one thread with an asyncio loop of its own, never the
console's (issue 43, "the keys never wait on the loop").

A run's runtime (its agent loop, LiteLLM's call path, its recording) does synchronous work
between its awaits: on the console's loop each such stretch was a stall of the frames and the
keys. Here the console's loop only hears what happened (`Outbox`) and sends the operator's
commands (`call`, `run`). The two threads share the interpreter's lock; with a console open
its loop goes first (`tuning.console_first`): the runs' loop starts a turn only while the
console's is asleep, and no stretch of the run holds the keys for longer than the switch
interval (`tuning.lock_switching`).

The thread starts with the first run and lives as long as the process (a daemon: a process
that leaves with a run still going does not wait for it; the console kills its runs first).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections import deque
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from loopdeck.tuning import console_first

T = TypeVar("T")
# What the runs' thread tells the console is delivered at most this often: frames are 50 ms
# apart (`tui.frame_pacing`), and each wake of the console's loop costs the run its turn.
DELIVERY_GAP_S = 0.01
Note = tuple[Callable[..., None], tuple[Any, ...]]

_lock = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None


def runs_loop() -> asyncio.AbstractEventLoop:
    """The runs' loop, its thread started on first use."""
    global _loop
    with _lock:
        if _loop is None:
            # Each turn waits while a console's loop is awake (`console_first.watch`).
            loop = asyncio.SelectorEventLoop(console_first.RunsSelector())
            started = threading.Event()

            def serve() -> None:
                asyncio.set_event_loop(loop)
                loop.call_soon(started.set)
                loop.run_forever()

            threading.Thread(target=serve, name="loopdeck-runs", daemon=True).start()
            started.wait()
            _loop = loop
        return _loop


def on_runs_loop() -> bool:
    """True on the runs' thread (its loop running here)."""
    loop = _loop
    if loop is None:
        return False
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:
        return False


def call(fn: Callable[..., object], *args: Any) -> None:
    """`fn(*args)` on the runs' loop, soon (at once when already there), in the order called."""
    if on_runs_loop():
        fn(*args)
    else:
        runs_loop().call_soon_threadsafe(fn, *args)


async def run(coro: Coroutine[Any, Any, T]) -> T:
    """`coro` as a task on the runs' loop, awaited from the caller's loop. A caller cancelled
    cancels the task and waits until it has ended (its stop recorded, its store closed)
    before it is cancelled itself: nothing of the run is left going behind its caller."""
    if on_runs_loop():
        return await coro
    here = asyncio.get_running_loop()
    console_first.watch(here)  # a console's loop goes first (none: nothing is watched)
    ended: asyncio.Future[T] = here.create_future()
    task: list[asyncio.Task[T]] = []

    def settle(done: asyncio.Task[T]) -> None:
        if ended.done():
            return
        if done.cancelled():
            ended.cancel()
        elif (error := done.exception()) is not None:
            ended.set_exception(error)
        else:
            ended.set_result(done.result())

    def hand_back(done: asyncio.Task[T]) -> None:
        try:
            here.call_soon_threadsafe(settle, done)
        except RuntimeError:  # the caller's loop has closed: nobody is left to hear it
            if not done.cancelled():
                done.exception()  # taken, not logged as never retrieved

    def start() -> None:
        started = asyncio.ensure_future(coro)
        task.append(started)
        started.add_done_callback(hand_back)

    runs_loop().call_soon_threadsafe(start)
    try:
        return await asyncio.shield(ended)
    except asyncio.CancelledError:
        if not ended.done():
            call(lambda: task[0].cancel())  # `start` ran first: the loop keeps their order
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await ended  # cancelled as asked, or ended otherwise: ended either way
        raise


class Outbox:
    """What a run's thread tells one other loop (the console's), in the order told: each note
    a call made there, every note waiting delivered in one wake of that loop, at most one wake
    each `gap` (a wake costs the run the interpreter's lock: the woken loop takes it)."""

    def __init__(self, loop: asyncio.AbstractEventLoop | None, gap: float = DELIVERY_GAP_S):
        self.loop = loop  # None: told at once, on the teller's thread
        self.gap = gap
        self._notes: deque[Note] = deque()
        self._woken = False
        self._delivered_at = 0.0  # the hearer's loop's clock

    def tell(self, fn: Callable[..., None], *args: Any) -> None:
        loop = self.loop
        if loop is None or not on_runs_loop():
            fn(*args)  # told on the hearer's own thread: at once
            return
        self._notes.append((fn, args))
        if self._woken:
            return
        self._woken = True
        try:
            loop.call_soon_threadsafe(self._deliver_due)
        except RuntimeError:  # the hearer's loop has closed: nobody is left to hear it
            self._notes.clear()

    def _deliver_due(self) -> None:
        assert self.loop is not None
        wait = self._delivered_at + self.gap - self.loop.time()
        if wait > 0:
            self.loop.call_later(wait, self._deliver)
        else:
            self._deliver()

    def deliver_now(self) -> None:
        """Every note waiting heard now, on the hearer's loop (the run ended: what it told
        comes before its outcome is known there)."""
        if self._notes:
            self._deliver()

    def _deliver(self) -> None:
        assert self.loop is not None
        self._woken = False  # a note told from now on wakes the loop again
        self._delivered_at = self.loop.time()
        notes = self._notes
        try:
            while notes:
                fn, args = notes.popleft()
                fn(*args)
        finally:  # a hearer that raised (said by the loop's handler): the rest still heard
            if notes and not self._woken:
                self._woken = True
                self.loop.call_soon(self._deliver)
