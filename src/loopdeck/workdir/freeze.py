"""Every process below some guardians stopped (SIGSTOP) while loopdeck does something in the
working copy nobody else may touch (the goal check), then let go on (SIGCONT).

A guardian is a child subreaper (`guardian.py`): whatever its command starts stays below it, a
daemon in a session of its own included, so the processes below it are all the agent's. The
guardian itself is not stopped (a stop it is told of must still reach it); each process below
it is, again and again until no new one appears and each one stopped is seen stopped (a
process not stopped yet could fork). A process the agent made that is not below its guardian
cannot exist; one that cannot be stopped in time (bounded) is named: the caller decides.
The stopped processes are kept in a `Frozen` the caller owns and always thaws (`finally`),
a cancelled caller too. A clock a stopped process is measured by keeps counting meanwhile (a
terminal command's timeout: the goal check's time counts against it).
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Iterable

from loopdeck.workdir.guardian import descendants

STOP_WAIT_S = 2.0  # for each process signalled to be seen stopped
POLL_S = 0.005


def _state(pid: int) -> bytes | None:
    """The process's state letter (`T` stopped), None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as file:
            stat = file.read()
    except OSError:
        return None
    fields = stat[stat.rfind(b")") + 2 :].split()
    return fields[0] if fields else None


def _stopped(pid: int) -> bool:
    state = _state(pid)
    return state is None or state in (b"T", b"t", b"Z", b"X")


class Frozen:
    """The processes a freeze stopped, owned by its caller, filled as each is signalled:
    `thaw` lets each go on and ends the freeze for good (a freeze still running in its
    thread, its caller cancelled, signals nothing more), so a caller that always thaws
    leaves nothing stopped whatever happened meanwhile."""

    def __init__(self) -> None:
        self.pids: set[int] = set()
        self.thawed = False
        self._lock = threading.Lock()

    def stop(self, pid: int) -> bool:
        """`pid` stopped and kept, unless the freeze was thawed already (False)."""
        with self._lock:
            if self.thawed:
                return False
            self.pids.add(pid)
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGSTOP)
            return True

    def thaw(self) -> None:
        with self._lock:
            self.thawed = True
            pids = set(self.pids)
        thaw(pids)


def freeze(guardians: Iterable[int], frozen: Frozen) -> set[int]:
    """Each process below `guardians` stopped, kept in `frozen` as it is signalled (thaw it
    whatever happens next): those not seen stopped in time."""
    roots = list(guardians)
    signalled = frozen.pids
    end = time.monotonic() + STOP_WAIT_S
    while True:
        below = set().union(*(descendants(root) for root in roots)) if roots else set()
        new = below - signalled
        for pid in new:
            if not frozen.stop(pid):
                return set()  # thawed meanwhile: the caller went on without it
        while time.monotonic() < end and not all(_stopped(pid) for pid in set(signalled)):
            time.sleep(POLL_S)
        if not new or time.monotonic() >= end:
            return {pid for pid in set(signalled) if not _stopped(pid)}


def thaw(pids: Iterable[int]) -> None:
    for pid in pids:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGCONT)
