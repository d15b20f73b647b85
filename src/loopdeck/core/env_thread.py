"""Environment code off the event loop: one worker thread, one call at a time.

Snapshots, goal checks and sync tool bodies can block for seconds; on the loop they would
freeze every key and the heartbeat. Here they run on a daemon thread, so a call the runtime
stops waiting for (a timeout, a kill, the deadline) never holds up the loop or the process's
exit. Until such a stray call ends no other env code starts: the next call waits for it, up to
a bound, then fails with `EnvBusy` naming it.

Most env code returns in microseconds, and handing its result back through the loop (a wake-up
of the loop's selector, then two more turns of the loop) costs more than the code. So the loop
first waits for the env thread itself, off the interpreter's lock, for at most `QUICK_WAIT_S`:
env code done by then hands its result straight over; anything slower is awaited as before.
Headless, the loop waits so whatever else is ready (LiteLLM's logging tasks, the store's
writer: nobody is kept waiting by half a millisecond). Under a console or in a worker, whose
loop drives other runs (`only_when_idle`, set by the console's link and a worker's leased run
to a test of the loop: `loopdeck.tuning.loop_idle`, as asyncio has no public one) it waits only
when it has nothing else to do, no callback ready and no timer due:
blocking regardless made frames and keys wait for the interpreter's lock to come back from
LiteLLM's threads (loop stall worse in 8 of 8 A/B pairs, 20-28 -> 26-38 ms); blocking only
when idle left the stall where it was (ten pairs).

Env code that outlasted the wait last time it ran (an MCP server's round trip, a tool that
sleeps) is not waited for again: the loop would only block for the wait and then await it as
well. Which label was slow is learned from how long each call's code ran (`took`), so code
that turns quick again is waited for again from its next call.

The env thread waits for work on a pipe (`core/env_jobs.py`), never spinning: a call is
queued, then one byte written. A write lets the interpreter's lock go before it wakes the
thread, so the thread wakes to a free lock and runs the code at once. A queue's `put` woke it
with the lock still held: it woke, found the lock taken, slept again until the loop's wait let
it go (a hand-over and back, `bench/model_path.py`: 20-52 -> 8-28 us on this 2-core machine,
loaded).

A call can bring env code to run straight after it on the thread (`then`): the runtime's
snapshot after a tool, which the goal check takes with `after` without a hand-over of its own
(two hand-overs a step instead of three). It is skipped when the call raised, dropped (waited
for, its result discarded) by any other env call, and a stray like any other if it hangs.
Env code can also be started with no call before it (`start`), taken the same way: the read
of the state a decision's calls are proposed on, begun as the decision is read, so that the
thread wakes while the loop records the decision rather than after.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any, TypeVar

from loopdeck.core.env_jobs import Jobs
from loopdeck.core.env_spare import Serving, Spares
from loopdeck.core.timeouts import bounded

T = TypeVar("T")
# Env code to run on the env thread straight after a call returns, and its label (`call`).
Then = tuple[str, Callable[[], Any]]
# How long the loop blocks for env code before awaiting it (see above).
QUICK_WAIT_S = 0.0005


class EnvBusy(Exception):
    """Env code the runtime stopped waiting for is still running past the bound."""

    def __init__(self, label: str, running_s: float) -> None:
        super().__init__(f"{label} is still running after {running_s:.1f}s")
        self.label = label


class _Job:
    """One env call. Its result goes to the loop waiting for it (`quick`), or through the
    loop's future; `lock` decides which, so a result is handed over exactly once."""

    __slots__ = (
        "done", "ended", "error", "finished", "fn", "label", "lock", "quick", "started", "took",
        "value",
    )  # fmt: skip

    def __init__(self, label: str, fn: Callable[[], Any]) -> None:
        self.label = label
        self.fn = fn
        self.started = time.monotonic()
        self.took = 0.0  # how long its env code ran, set on the env thread as it ends
        self.finished = False
        self.value: Any = None
        self.error: BaseException | None = None
        self.quick = True  # the loop is blocked on `done`, waiting for the result itself
        self.done = threading.Lock()  # held until the call ends
        self.done.acquire()
        self.lock = threading.Lock()
        self.ended: Callable[[], None] | None = None  # called on the env thread as it ends

    def when_ended(self, callback: Callable[[], None]) -> bool:
        """Have the env thread call `callback` once this call ends; False if it has."""
        with self.lock:
            if self.finished:
                return False
            self.ended = callback
            return True

    def take_quickly(self, seconds: float) -> bool:
        """The loop's short wait: True if the call ended in time (its result is taken here);
        False if it is still running (the result will come through the future)."""
        if seconds > 0:
            self.done.acquire(timeout=seconds)
        with self.lock:
            self.quick = False
            return self.finished

    def result(self) -> Any:
        if self.error is not None:
            raise self.error
        return self.value


def _settle(future: asyncio.Future[Any], job: _Job) -> None:
    if future.done():
        return  # the runtime stopped waiting: the result is discarded
    if job.error is not None:
        future.set_exception(job.error)
    else:
        future.set_result(job.value)


class _Ahead:
    """Env code queued to start as soon as a call returns (`EnvThread.call(then=...)`), for the
    runtime to take with `EnvThread.after`: the snapshot after a tool, whose own hand-over to
    the env thread is saved. A call that raised skips it."""

    __slots__ = ("future", "job", "skipped")

    def __init__(self, label: str, fn: Callable[[], Any], future: asyncio.Future[Any]) -> None:
        self.job = _Job(label, fn)
        self.future = future
        self.skipped = False


def _end_wait(over: asyncio.Future[None]) -> None:
    if not over.done():
        over.set_result(None)


_Item = tuple[_Job, asyncio.AbstractEventLoop, "asyncio.Future[Any]", _Ahead | None]


def _serve(jobs: Jobs) -> None:
    """The env thread, until `None`. It holds nothing of a call while it waits for the next
    (`_serve_one`'s locals go with it): an EnvThread never closed is still dropped."""
    try:
        while (item := jobs.get()) is not None:
            _serve_one(item)
            del item
    finally:
        jobs.close_reading_end()


def _serve_one(item: _Item) -> None:
    """A call, and the `then` that runs straight after it."""
    job, loop, future, ahead = item
    EnvThread._run(job, loop, future)
    if ahead is None:
        return
    # Straight on, still holding the interpreter's lock: the loop, woken by the call's
    # result, usually finds this done when it asks, with no hand-over of its own.
    ahead.job.started = time.monotonic()
    if job.error is None:
        EnvThread._run(ahead.job, loop, ahead.future)
    else:
        ahead.skipped = True
        EnvThread._run(ahead.job, loop, ahead.future, skip=True)


def _serving(jobs: Jobs) -> Serving:
    """A new env thread serving `jobs`, started (its start waits for it to run)."""
    thread = threading.Thread(target=_serve, args=(jobs,), name="loopdeck-env", daemon=True)
    thread.start()
    return jobs, thread


_SPARES = Spares(lambda: _serving(Jobs()))

# True if the loop has nothing else to do within so many seconds (a console's: see above).
IdleTest = Callable[[asyncio.AbstractEventLoop, float], bool]


class EnvThread:
    def __init__(self, stray_wait_s: float = 10.0) -> None:
        self.stray_wait_s = stray_wait_s
        self.quick_wait_s = QUICK_WAIT_S  # 0: the loop never blocks for env code
        # A console's loop blocks only if this says nothing else is due within the wait.
        self.only_when_idle: IdleTest | None = None
        self._jobs: Jobs | None = None  # with the thread, until `close`
        self._ended: weakref.finalize[[], EnvThread] | None = None  # ends it if not closed
        self._thread: threading.Thread | None = None
        self._current: _Job | None = None
        self._gate = asyncio.Lock()
        self._ahead: _Ahead | None = None  # the last call's `then`, until taken or dropped
        # Labels whose last call outlasted the quick wait: not waited for (see above).
        self._slow: set[str] = set()
        self._refill = False  # a spare taken: the next is started after this call

    @property
    def stray(self) -> str | None:
        """The env call still running that nobody waits for, if any."""
        ahead = self._ahead.job if self._ahead is not None else None
        for job in (self._current, ahead):
            if job is not None and not job.finished:
                return f"{job.label} (running {time.monotonic() - job.started:.1f}s)"
        return None

    @staticmethod
    def _run(
        job: _Job, loop: asyncio.AbstractEventLoop, future: asyncio.Future[Any], skip: bool = False
    ) -> None:
        if not skip:
            began = time.monotonic()
            try:
                job.value = job.fn()
            except BaseException as exc:  # handed to the awaiting coroutine, never lost here
                job.error = exc
            job.took = time.monotonic() - began
        with job.lock:
            job.finished = True
            taken = job.quick
            ended = job.ended
        job.done.release()
        if ended is not None:
            ended()
        if taken:
            return
        # A closed loop means the process is leaving and nobody waits for this result.
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(_settle, future, job)

    async def _wait_for_stray(self) -> None:
        """Wait for a call nobody waits for any more to end (woken by its end), up to the
        bound: past it, `EnvBusy` names it."""
        job = self._current
        if job is None or job.finished:
            return
        loop = asyncio.get_running_loop()
        over: asyncio.Future[None] = loop.create_future()

        def wake() -> None:
            # A closed loop means the process is leaving and nobody waits any more.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(_end_wait, over)

        if not job.when_ended(wake):
            return
        try:
            await bounded(over, self.stray_wait_s)
        except TimeoutError:
            raise EnvBusy(job.label, time.monotonic() - job.started) from None

    async def call(
        self,
        label: str,
        fn: Callable[..., T],
        *args: Any,
        then: Then | None = None,
        timeout_s: float | None = None,
    ) -> T:
        """Run `fn(*args)` on the env thread and wait for it. Cancelling the wait abandons the
        call: its result is discarded and the next call waits for it to end. `then` (a label
        and a function) runs straight after it if it returns, for `after` to take.
        `timeout_s` bounds the whole call (`TimeoutError`), as `bounded` around it would; its
        timer is armed only when the call has to wait on the loop: a call whose env code is
        done within the quick wait (a tool's, most of the time) arms none."""
        if timeout_s is not None and (self._gate.locked() or self._earlier_running()):
            # It waits for env code started before it: bounded all through.
            return await bounded(self.call(label, fn, *args, then=then), timeout_s)
        async with self._gate:
            if self._ahead is not None or self._earlier_running():
                await self._settle_earlier()
            loop = asyncio.get_running_loop()
            deadline = None if timeout_s is None else loop.time() + timeout_s
            job = _Job(label, lambda: fn(*args))
            future: asyncio.Future[T] = loop.create_future()
            ahead = None
            if then is not None:
                ahead = self._ahead = _Ahead(then[0], then[1], loop.create_future())
            jobs = self._jobs
            if jobs is None or self._thread is None or not self._thread.is_alive():
                jobs = self._start()
            self._current = job
            jobs.put((job, loop, future, ahead))
            try:
                return await self._wait(job, future, deadline)
            finally:
                if self._refill:
                    self._refill = False
                    _SPARES.refill()

    def start(self, label: str, fn: Callable[[], Any]) -> bool:
        """Start `fn()` on the env thread now, for `after(label, fn)` to take later, and
        return at once: env code begun while the loop still has work of its own, so the
        thread's wake-up overlaps that work. False (nothing started) while other env code
        runs or waits to be taken: `after` then runs it as `call` would."""
        if self._gate.locked() or self._earlier_running():
            return False
        # A `then` nobody took (its call failed): dropped, as the next call would drop it.
        self._ahead = None
        loop = asyncio.get_running_loop()
        ahead = self._ahead = _Ahead(label, fn, loop.create_future())
        jobs = self._jobs
        if jobs is None or self._thread is None or not self._thread.is_alive():
            jobs = self._start()
        jobs.put((ahead.job, loop, ahead.future, None))
        return True

    def _earlier_running(self) -> bool:
        """Env code started before is still running: a call would wait for it first."""
        current, ahead = self._current, self._ahead
        if current is not None and not current.finished:
            return True
        return ahead is not None and not ahead.job.finished

    async def after(self, label: str, fn: Callable[[], T]) -> T:
        """`fn()`, as the last call's `then` ran it if that was `fn` (the call returned);
        otherwise run now, as `call` does. A call abandoned before it (a tool past its
        timeout) is waited for up to the bound first, as `call` waits for it."""
        async with self._gate:
            await self._wait_for_stray()
            ahead, self._ahead = self._ahead, None
            if ahead is not None and ahead.job.fn == fn:
                self._current = ahead.job
                value: T = await self._wait(ahead.job, ahead.future)
                if not ahead.skipped:
                    return value
        return await self.call(label, fn)

    async def _settle_earlier(self) -> None:
        """Wait for the env code started before this call: a stray call, then a `then` nobody
        took (its result is discarded)."""
        await self._wait_for_stray()
        ahead, self._ahead = self._ahead, None
        if ahead is not None and not ahead.job.finished:
            self._current = ahead.job
            await self._wait_for_stray()

    async def _wait(self, job: _Job, future: asyncio.Future[T], deadline: float | None = None) -> T:
        """The call's result: taken at once if its code ends within the quick wait, else
        awaited (until `deadline`, the loop's time, if any)."""
        quick = 0.0 if job.label in self._slow else self.quick_wait_s
        idle = self.only_when_idle
        if quick and idle is not None and not idle(asyncio.get_running_loop(), quick):
            quick = 0.0
        if job.take_quickly(quick):
            self._learn(job)
            result: T = job.result()
            return result
        try:
            if deadline is None:
                return await future
            async with asyncio.timeout_at(deadline):
                return await future
        finally:
            self._learn(job)

    def _learn(self, job: _Job) -> None:
        """Whether the loop waits for this label's next call (a call not ended yet, whose wait
        was stopped, counts as slow)."""
        if job.finished and job.took <= self.quick_wait_s:
            self._slow.discard(job.label)
        else:
            self._slow.add(job.label)

    async def run_async(self, label: str, coro_fn: Callable[..., Any], *args: Any) -> Any:
        """An async tool runs on the loop, but still one env call at a time (a `then` still
        running on the env thread included)."""
        async with self._gate:
            await self._settle_earlier()
            return await coro_fn(*args)

    def _start(self) -> Jobs:
        """The thread and its queue: the spare (`core/env_spare.py`), else a new one; a queue
        given before the first call (a test's, counting hand-overs) on a thread started now."""
        if self._ended is not None:
            self._ended()  # a thread closed, or that ended on its own: its pipe is closed
        given = self._jobs if self._jobs is not None and self._thread is None else None
        if given is not None:
            jobs, self._thread = _serving(given)
        else:
            jobs, self._thread = _SPARES.take() or _serving(Jobs())
            self._refill = True  # the next run's, once this first call is done (`call`)
        self._jobs = jobs
        # The thread holds its queue, not this object: an EnvThread never closed still goes,
        # and its thread ends with it.
        self._ended = weakref.finalize(self, jobs.end)
        self._ended.atexit = False
        return jobs

    def close(self) -> None:
        """The thread ends after its current call; a stray call is not waited for."""
        if self._ended is not None:
            self._ended()
        self._jobs = None
