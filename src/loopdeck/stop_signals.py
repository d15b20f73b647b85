"""SIGTERM and SIGINT end this process's live runs as a kill, recorded by the signal's name.

A service manager's stop and a user's Ctrl-C reach a run the way the kill switch does: the
run stops `killed` ("killed by signal SIGTERM"), its writer commits what it holds, the summary
or the farewell line is said. Then the process ends by that same signal (`exit_by_signal`),
as a shell or a service manager expects of a program that cleaned up first, and takes its env
code's child processes with it (`end_children`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
CHILD_GRACE_S = 2.0
PR_SET_CHILD_SUBREAPER = 36

Stop = Callable[[str], None]

# The signal that ended this process's runs, for the CLI's exit (`exit_by_signal`).
ended_by: signal.Signals | None = None


def by_signal(sig: signal.Signals) -> str:
    """Who stopped the run, as recorded: `signal SIGTERM`."""
    return f"signal {sig.name}"


class StopSignals:
    """While installed on a loop, the first stop signal calls `on_stop(by)`, and a later one
    `on_again(by)`: stop harder. One that comes before a target is aimed is kept and delivered
    at `aim` (the run being prepared then is killed as it starts)."""

    def __init__(self) -> None:
        self.received: signal.Signals | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._on_stop: Stop | None = None
        self._on_again: Stop | None = None
        self._delivered = False

    def install(self, loop: asyncio.AbstractEventLoop | None = None) -> bool:
        """Handle both signals on `loop` (the running one by default). False where a loop
        cannot take them (not the main thread's, or not on Unix): the defaults stay."""
        loop = loop or asyncio.get_running_loop()
        try:
            for sig in STOP_SIGNALS:
                loop.add_signal_handler(sig, self._handle, sig)
        except (ValueError, RuntimeError, NotImplementedError):
            for sig in STOP_SIGNALS:
                with contextlib.suppress(ValueError, RuntimeError, NotImplementedError):
                    loop.remove_signal_handler(sig)
            return False
        self._loop = loop
        return True

    def remove(self) -> None:
        if self._loop is None:
            return
        for sig in STOP_SIGNALS:
            self._loop.remove_signal_handler(sig)
        self._loop = None

    def aim(self, on_stop: Stop, on_again: Stop | None = None) -> None:
        self._on_stop, self._on_again = on_stop, on_again
        self._delivered = False
        if self.received is not None:
            self._deliver()

    def _handle(self, sig: signal.Signals) -> None:
        global ended_by
        if self.received is None:
            self.received = ended_by = sig
            self._deliver()
        elif self._on_again is not None:
            self._on_again(by_signal(sig))

    def _deliver(self) -> None:
        if self._on_stop is None or self._delivered or self.received is None:
            return
        self._delivered = True
        self._on_stop(by_signal(self.received))


def _parents() -> dict[int, int]:
    """Every process's parent, read off /proc (empty where there is none)."""
    parents: dict[int, int] = {}
    with contextlib.suppress(OSError):
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                stat = (entry / "stat").read_text()
            except OSError:  # it ended while being read
                continue
            # `pid (comm) state ppid ...`: comm may hold spaces and parentheses.
            fields = stat[stat.rfind(")") + 2 :].split()
            if len(fields) > 1 and fields[0] != "Z":
                parents[int(entry.name)] = int(fields[1])
    return parents


def descendants(pid: int | None = None) -> list[int]:
    """The live processes below `pid` (this process by default), children first."""
    parents = _parents()
    found: list[int] = []
    frontier = [os.getpid() if pid is None else pid]
    while frontier:
        below = [child for child, parent in parents.items() if parent in frontier]
        found += below
        frontier = below
    return found


def end_children(grace_s: float = CHILD_GRACE_S) -> list[int]:
    """Stop the processes this one started (an env's subprocesses, and all below them):
    SIGTERM, then SIGKILL after `grace_s` for those still running, new ones included as they
    show; our own children are reaped. This process becomes a child subreaper first (it is
    about to exit), so a daemon orphaned as its parent ends is re-parented here and ended too,
    not left to init. Returns those that had to be killed. Linux only (/proc); elsewhere
    there is nothing to find."""
    _adopt_orphans()
    told: set[int] = set()
    end = time.monotonic() + grace_s
    while (left := _live_below(told)) and time.monotonic() < end:
        for pid in left - told:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGTERM)
        told |= left
        time.sleep(0.02)
    killed: list[int] = []
    end = time.monotonic() + grace_s
    while left and time.monotonic() < end:
        for pid in left:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        killed += sorted(left - set(killed))
        time.sleep(0.02)
        left = _live_below(left)
    return killed


def _adopt_orphans() -> None:
    """`PR_SET_CHILD_SUBREAPER`: orphans below this process are re-parented to it."""
    import ctypes

    with contextlib.suppress(OSError, AttributeError):  # not Linux
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def _live_below(ours: set[int]) -> set[int]:
    """The live processes below this one, once those of `ours` that ended are reaped."""
    for pid in ours:
        with contextlib.suppress(OSError):  # not ours, or reaped by its own waiter
            os.waitpid(pid, os.WNOHANG)
    return set(descendants())


def exit_by_signal(sig: signal.Signals) -> None:
    """End this process by `sig` with its default action, once all is recorded and said."""
    signal.signal(sig, signal.SIG_DFL)
    os.kill(os.getpid(), sig)
    os._exit(128 + sig)  # not reached: the signal's default action ends the process
