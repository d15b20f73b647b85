"""A console that cannot go on (Textual ends the app on an exception nothing caught: a message
handler, a timer, a worker that exits on error): every run this console drives records its
stop, `crashed` with "console failed: <error>; the traceback is in <file>", and the console
leaves non-zero (Textual's return code 1) with a farewell line naming the file.

Textual cancels every worker as it ends, before its screens and the app unmount. So each run
of this console is driven in a task of its own (`RunScreen.drive`, listed in
`SharedState.own_drives`): `failed` (from the app's `_handle_exception`, Textual's one door
for such an exception) writes the traceback and tells each live run to stop; the app's
unmount (`runs_recorded`) waits for each to record its stop, its writer closed, before the
sessions are cleaned up. A plain exit with a run still live (the quit paths kill live runs
first: only a test leaves so) cancels it, as Textual's worker cancellation did, and waits
until it has unwound on the runs' thread (`operator/run_loop.py`).

An action that raises is not this: it is said and the console goes on (`failures.py`).
"""

from __future__ import annotations

import asyncio
import os
import traceback
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from loopdeck.tui.failures import said

if TYPE_CHECKING:
    from loopdeck.tui.shared_state import SharedState

# What the runs get to record their stop; one that is still loading its model library
# (LiteLLM's import, seconds on a loaded machine) stops once it is loaded.
RECORD_STOP_S = 60.0
ERROR_SHOWN = 300  # characters of the error kept in the stop's detail (the file has it all)


class Console(Protocol):
    """What of the console a failure reads and sets (`ConsoleState`'s)."""

    failure: ConsoleFailure | None
    shared: SharedState  # its `own_drives`
    farewell: str


@dataclass
class ConsoleFailure:
    """What failed, where its traceback went, and what became of this console's runs."""

    error: BaseException
    traceback_file: Path | None
    file_problem: str = ""  # why no file was written
    told: list[str] = field(default_factory=list)  # the runs told to stop crashed
    unrecorded: list[str] = field(default_factory=list)  # ... that had not stopped in time

    @property
    def what(self) -> str:
        """The error in one line, cut: "RuntimeError: boom"."""
        line = " ".join(said(self.error).split())
        return line if len(line) <= ERROR_SHOWN else line[: ERROR_SHOWN - 1] + "…"

    @property
    def where(self) -> str:
        if self.traceback_file is not None:
            return f"the traceback is in {self.traceback_file}"
        return f"its traceback could not be written ({self.file_problem})"

    @property
    def detail(self) -> str:
        """The runs' stop detail, after `crashed: `."""
        return f"console failed: {self.what}; {self.where}"

    def farewell(self) -> str:
        """The terminal's last line: what failed, where the traceback is, the runs."""
        runs = ""
        recorded = [run for run in self.told if run not in self.unrecorded]
        if recorded:
            runs += f" · stopped crashed: {', '.join(recorded)}"
        if self.unrecorded:
            runs += (
                f" · not recorded in {RECORD_STOP_S:.0f} s: {', '.join(self.unrecorded)}"
                " (the next reader of the store marks them crashed)"
            )
        return f"loopdeck: the console failed: {self.what}; {self.where}{runs}"


def failure_folder() -> Path:
    """Where a console that failed leaves its traceback: the user's log folder for loopdeck."""
    import platformdirs

    return Path(platformdirs.user_log_dir("loopdeck"))


def write_traceback(error: BaseException) -> Path:
    """The whole traceback, in a new file of its own (the owner's alone); raises OSError."""
    folder = failure_folder()
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    when = datetime.now().astimezone()
    stem = f"console-failed-{when:%Y%m%d-%H%M%S}-{os.getpid()}"
    text = "".join(traceback.format_exception(error))
    for n in range(1, 100):  # a second failure in the same second of this process: a new file
        path = folder / (f"{stem}.txt" if n == 1 else f"{stem}-{n}.txt")
        try:
            descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            break
        except FileExistsError:
            continue
    else:
        raise FileExistsError(f"{folder}: {stem}.txt and 98 more exist")
    with os.fdopen(descriptor, "w", encoding="utf-8", errors="backslashreplace") as file:
        file.write(f"loopdeck console failed at {when.isoformat()} (pid {os.getpid()})\n\n")
        file.write(text)
    return path


def cause(error: BaseException) -> BaseException:
    """The error itself: a worker that raised reaches the app wrapped in `WorkerFailed`."""
    from textual.worker import WorkerFailed

    return error.error if isinstance(error, WorkerFailed) else error


def failed(app: Console, error: BaseException) -> None:
    """The first failure the console cannot go on from: its traceback in a file, and each run
    this console drives told to stop `crashed` (a wait in flight ends now; the run records its
    stop as any stop). Only the first failure counts; nothing here may raise."""
    if app.failure is not None:
        return
    from loopdeck.core.states import StopReason
    from loopdeck.operator import run_loop

    error = cause(error)
    try:
        failure = ConsoleFailure(error, write_traceback(error))
    except OSError as exc:
        failure = ConsoleFailure(error, None, file_problem=said(exc))
    app.failure = failure
    for run_id, drive in app.shared.own_drives.items():
        if not drive.task.done():
            # On the runs' loop, where the run's waits are (`operator.run_loop`).
            run_loop.call(drive.runtime.control.fail, StopReason.CRASHED, failure.detail)
            failure.told.append(run_id)
    app.farewell = failure.farewell()


async def runs_recorded(app: Console) -> None:
    """The app is going: after a failure, each run's stop recorded (bounded), the farewell
    saying which were; otherwise a run still live is cancelled (and waited for, bounded)."""
    drives = [drive.task for drive in app.shared.own_drives.values() if not drive.task.done()]
    if not drives:
        return
    if app.failure is None:
        for task in drives:
            task.cancel()
        # Each ends once its run, on the runs' thread, has unwound (`run_loop.run`): the
        # sessions are not cleaned up under a run still going.
        await asyncio.wait(drives, timeout=RECORD_STOP_S)
        return
    ended, late = await asyncio.wait(drives, timeout=RECORD_STOP_S)
    for task in ended:  # a run that ended in error said so on its screen; taken, not logged
        if not task.cancelled():
            task.exception()
    running = {drive.task: run_id for run_id, drive in app.shared.own_drives.items()}
    app.failure.unrecorded = [running[task] for task in late]
    app.farewell = app.failure.farewell()
