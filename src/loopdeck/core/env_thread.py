"""Environment code off the event loop: one worker thread, one call at a time.

Snapshots, goal checks and sync tool bodies can block for seconds; on the loop they would
freeze every key and the heartbeat. Here they run on a daemon thread, so a call the runtime
stops waiting for (a timeout, a kill, the deadline) never holds up the loop or the process's
exit. Until such a stray call ends no other env code starts: the next call waits for it, up to
a bound, then fails with `EnvBusy` naming it.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

T = TypeVar("T")


class EnvBusy(Exception):
    """Env code the runtime stopped waiting for is still running past the bound."""

    def __init__(self, label: str, running_s: float) -> None:
        super().__init__(f"{label} is still running after {running_s:.1f}s")
        self.label = label


@dataclass
class _Job:
    label: str
    fn: Callable[[], Any]
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[Any]
    started: float = field(default_factory=time.monotonic)
    finished: threading.Event = field(default_factory=threading.Event)


def _settle(future: asyncio.Future[Any], value: Any, error: BaseException | None) -> None:
    if future.done():
        return  # the runtime stopped waiting: the result is discarded
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(value)


class EnvThread:
    def __init__(self, stray_wait_s: float = 10.0) -> None:
        self.stray_wait_s = stray_wait_s
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._current: _Job | None = None
        self._gate = asyncio.Lock()

    @property
    def stray(self) -> str | None:
        """The env call still running that nobody waits for, if any."""
        job = self._current
        if job is None or job.finished.is_set():
            return None
        return f"{job.label} (running {time.monotonic() - job.started:.1f}s)"

    def _serve(self) -> None:
        while (job := self._jobs.get()) is not None:
            value: Any = None
            error: BaseException | None = None
            try:
                value = job.fn()
            except BaseException as exc:  # handed to the awaiting coroutine, never lost here
                error = exc
            job.finished.set()
            # A closed loop means the process is leaving and nobody waits for this result.
            with contextlib.suppress(RuntimeError):
                job.loop.call_soon_threadsafe(_settle, job.future, value, error)

    async def _wait_for_stray(self) -> None:
        job = self._current
        if job is None or job.finished.is_set():
            return
        end = time.monotonic() + self.stray_wait_s
        while not job.finished.is_set():
            if time.monotonic() >= end:
                raise EnvBusy(job.label, time.monotonic() - job.started)
            await asyncio.sleep(0.02)

    async def call(self, label: str, fn: Callable[..., T], *args: Any) -> T:
        """Run `fn(*args)` on the env thread and wait for it. Cancelling the wait abandons the
        call: its result is discarded and the next call waits for it to end."""
        async with self._gate:
            await self._wait_for_stray()
            loop = asyncio.get_running_loop()
            job = _Job(label, lambda: fn(*args), loop, loop.create_future())
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._serve, name="loopdeck-env", daemon=True
                )
                self._thread.start()
            self._current = job
            self._jobs.put(job)
            result: T = await job.future
            return result

    async def run_async(self, label: str, coro_fn: Callable[..., Any], *args: Any) -> Any:
        """An async tool runs on the loop, but still one env call at a time."""
        async with self._gate:
            await self._wait_for_stray()
            return await coro_fn(*args)

    def close(self) -> None:
        """The thread ends after its current call; a stray call is not waited for."""
        if self._thread is not None:
            self._jobs.put(None)
