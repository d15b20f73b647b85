"""A running call's progress, told from wherever the tool runs and recorded on the run's loop
(`ToolProgress`): at most one event per call every REPORT_EVERY_S, the newest report kept
for the next, and the last one before the call ends (its `ToolFinished` comes after it), so a
chatty server cannot flood the log.

`CallHandler` opens `reporting` around each dispatch; the call's tool reaches it through
`progress_reporter()` (an MCP env hands it to its connection's loop, where the SDK calls it) or
`report_progress(...)` (a Python tool's own, on the env thread or the run's loop). A report is
taken from any thread as `from_anywhere` takes what an env's thread says: it lands on the run's
loop, and nothing is said once that loop is closed."""

from __future__ import annotations

import asyncio
import contextlib
import math
import threading
from collections.abc import Iterator
from contextvars import ContextVar

from loopdeck.core.events import Emit
from loopdeck.core.progress_events import MESSAGE_CAP, ToolProgress
from loopdeck.core.text import capped, escape_surrogates

REPORT_EVERY_S = 1.0

Report = tuple[float, float | None, str | None]


class CallProgress:
    """One call's reports: `told` from any thread; recorded on the run's loop by `_record`."""

    def __init__(self, emit: Emit, run_id: str, call_id: str, tool: str, every_s: float):
        self._emit, self._run_id, self._call_id, self._tool = emit, run_id, call_id, tool
        self._every_s = every_s
        self._loop = asyncio.get_running_loop()
        self._lock = threading.Lock()
        self._newest: Report | None = None  # told, not recorded yet
        self._woken = False  # a wake-up is on its way to the loop
        self._recorded_at: float | None = None  # the loop's time of the last event
        self._timer: asyncio.TimerHandle | None = None
        self._ended = False

    def told(self, progress: float, total: float | None = None, message: str | None = None) -> None:
        """The tool's report, from any thread; one that is not a finite number is no report."""
        if not _finite(progress):
            return
        said = None if message is None else capped(escape_surrogates(str(message)), MESSAGE_CAP)
        with self._lock:
            whole = float(total) if total is not None and _finite(total) else None
            self._newest = (float(progress), whole, said)
            if self._woken:
                return  # a burst wakes the loop once
            self._woken = True
        with contextlib.suppress(RuntimeError):  # the loop is closed: the run is over
            self._loop.call_soon_threadsafe(self._wake)

    def _wake(self) -> None:
        with self._lock:
            self._woken = False
        if self._ended or self._timer is not None:
            return
        now = self._loop.time()
        if self._recorded_at is None or now - self._recorded_at >= self._every_s:
            self._record()
        else:
            self._timer = self._loop.call_at(self._recorded_at + self._every_s, self._record)

    def _record(self) -> None:
        self._timer = None
        with self._lock:
            report, self._newest = self._newest, None
        if report is None or self._ended:
            return
        self._recorded_at = self._loop.time()
        progress, total, message = report
        self._emit(
            ToolProgress,
            run_id=self._run_id,
            call_id=self._call_id,
            tool=self._tool,
            progress=progress,
            total=total,
            message=message,
        )

    def end(self) -> None:
        """The call is over: its last report recorded now, none after."""
        if self._timer is not None:
            self._timer.cancel()
        self._record()
        self._ended = True


_REPORTING: ContextVar[CallProgress | None] = ContextVar("loopdeck_call_progress", default=None)


@contextlib.contextmanager
def reporting(
    emit: Emit, run_id: str, call_id: str, tool: str, every_s: float = REPORT_EVERY_S
) -> Iterator[CallProgress]:
    """While the call runs, its tool's reports are this call's; its last is recorded as it
    ends (before its result), however it ends."""
    progress = CallProgress(emit, run_id, call_id, tool, every_s)
    token = _REPORTING.set(progress)
    try:
        yield progress
    finally:
        _REPORTING.reset(token)
        progress.end()


def progress_reporter() -> CallProgress | None:
    """The running call's progress (None outside a call): read where the call runs, handed
    to whatever thread hears the tool's reports."""
    return _REPORTING.get()


def report_progress(
    progress: float, total: float | None = None, message: str | None = None
) -> None:
    """A Python tool says how far it is (`progress` of `total`, None: unknown), shown with its
    call in the console and recorded (at most once a second). Outside a call it does nothing."""
    reporter = _REPORTING.get()
    if reporter is not None:
        reporter.told(progress, total, message)


def _finite(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
