"""SIGTERM, SIGINT and SIGHUP end this process's live runs as a kill, recorded by the signal's
name.

A service manager's stop, a user's Ctrl-C and a terminal that closes (a window shut, an SSH
session dropped) reach a run the way the kill switch does: the run stops `killed` ("killed by
signal SIGHUP"), its writer commits what it holds, the summary or the farewell line is said
where a terminal is left (`outlive_terminal`: one that is gone takes the words silently). Then
the process ends by that same signal (`exit_by_signal`), as a shell or a service manager
expects of a program that cleaned up first, and takes its env code's child processes with it
(`end_children`). A run command keeps a signal that comes before its loop can take them
(`kept`), so its run is recorded killed as it starts.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import Any, TextIO, cast

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
# A closing terminal says it more than once (to the session, to each job): a hangup stops,
# and a repeated one never stops harder.
HANGUP = signal.SIGHUP
# What a write to a hung-up terminal (EIO) or a pipe whose reader left (EPIPE) raises.
GONE = frozenset({errno.EIO, errno.EPIPE})
CHILD_GRACE_S = 2.0
PR_SET_CHILD_SUBREAPER = 36

Stop = Callable[[str], None]

# The signal that ended this process's runs, for the CLI's exit (`exit_by_signal`).
ended_by: signal.Signals | None = None
# One that came while no loop took the signals (`kept`), for the next `StopSignals.install`.
_kept: signal.Signals | None = None


# What a signal means where the program that started this process said so (`name_signal`).
_named: dict[signal.Signals, str] = {}


def name_signal(sig: signal.Signals, by: str) -> None:
    """Record a stop by `sig` as `by`: a browser tab's console (`loopdeck serve`) is told of
    its tab closing by a hangup, its terminal gone."""
    _named[sig] = by


def by_signal(sig: signal.Signals) -> str:
    """Who stopped the run, as recorded: `signal SIGTERM`, or the name given to it."""
    return _named.get(sig) or f"signal {sig.name}"


def handled() -> tuple[signal.Signals, ...]:
    """The stop signals this process takes: a SIGHUP ignored when it started (`nohup`) stays
    ignored, as its run is meant to outlive the terminal."""
    return tuple(
        sig for sig in STOP_SIGNALS if sig is not HANGUP or signal.getsignal(sig) != signal.SIG_IGN
    )


class StopSignals:
    """While installed on a loop, the first stop signal calls `on_stop(by)`, and a later one
    `on_again(by)`: stop harder (a repeated hangup does not). One that comes before a target is
    aimed (or before the loop took the signals, `kept`) is delivered at `aim` (the run being
    prepared then is killed as it starts)."""

    def __init__(self) -> None:
        self.received: signal.Signals | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._installed: tuple[signal.Signals, ...] = ()
        self._on_stop: Stop | None = None
        self._on_again: Stop | None = None
        self._delivered = False

    def install(self, loop: asyncio.AbstractEventLoop | None = None) -> bool:
        """Handle the signals on `loop` (the running one by default). False where a loop
        cannot take them (not the main thread's, or not on Unix): the defaults stay."""
        global _kept
        loop = loop or asyncio.get_running_loop()
        signals = handled()
        try:
            for sig in signals:
                loop.add_signal_handler(sig, self._handle, sig)
        except (ValueError, RuntimeError, NotImplementedError):
            for sig in signals:
                with contextlib.suppress(ValueError, RuntimeError, NotImplementedError):
                    loop.remove_signal_handler(sig)
            return False
        self._loop, self._installed = loop, signals
        if _kept is not None:
            loop.call_soon(self._handle, _kept)
            _kept = None
        return True

    def remove(self) -> None:
        """The defaults back; once a signal has told this process to go, later ones are only
        kept: they do not cut short its ending (the summary, its children, `exit_by_signal`)."""
        if self._loop is None:
            return
        for sig in self._installed:
            self._loop.remove_signal_handler(sig)
        self._loop, self._installed = None, ()
        if ended_by is not None:
            _keep_from_now()

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
        elif self._on_again is not None and sig is not HANGUP:
            self._on_again(by_signal(sig))

    def _deliver(self) -> None:
        if self._on_stop is None or self._delivered or self.received is None:
            return
        self._delivered = True
        self._on_stop(by_signal(self.received))


@contextlib.contextmanager
def kept(keeping: bool = True) -> Iterator[None]:
    """For a run command: until a loop takes them (`StopSignals.install`), a stop signal is
    kept, not obeyed. The command's imports take a second, and its run must still be
    recorded killed. One no loop took ends the process as it leaves (`ended_by`)."""
    global ended_by, _kept
    if not keeping or threading.current_thread() is not threading.main_thread():
        yield
        return
    before = {sig: signal.getsignal(sig) for sig in handled()}
    _keep_from_now()
    try:
        yield
    finally:
        if _kept is not None and ended_by is None:
            ended_by = _kept
        _kept = None
        if ended_by is None:  # told nothing: the handlers it had
            for sig, handler in before.items():
                if signal.getsignal(sig) is _keep and handler is not None:
                    signal.signal(sig, handler)


def _keep_from_now() -> None:
    for sig in handled():
        signal.signal(sig, _keep)


def _keep(signum: int, frame: FrameType | None) -> None:
    global _kept
    if _kept is None and ended_by is None:
        _kept = signal.Signals(signum)


class OutlivingStream:
    """stdout or stderr of a process that may outlive its terminal: a write or flush refused
    because the terminal hung up or the pipe's reader left (`GONE`) puts /dev/null under the
    stream's descriptor, so it and every later write (the console's frames included) land
    there, never raising nor blocking; what the run records is not lost with them."""

    def __init__(self, stream: TextIO) -> None:
        self.wrapped = stream

    def write(self, text: str) -> int:
        try:
            return self.wrapped.write(text)
        except OSError as exc:
            self._gone(exc)
            return len(text)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        try:
            self.wrapped.flush()
        except OSError as exc:
            self._gone(exc)

    def __getattr__(self, name: str) -> Any:
        if name == "wrapped":  # not set yet (a copy being made)
            raise AttributeError(name)
        return getattr(self.wrapped, name)

    def _gone(self, exc: OSError) -> None:
        if exc.errno not in GONE:
            raise exc
        null = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(null, self.wrapped.fileno())
        finally:
            os.close(null)
        with contextlib.suppress(OSError):
            self.wrapped.flush()  # what it still held goes there too


def outlive_terminal() -> None:
    """stdout and stderr (and `sys.__stderr__`, the console's drawing) as `OutlivingStream`s."""
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is None or isinstance(stream, OutlivingStream):
            continue
        outliving = cast(TextIO, OutlivingStream(stream))
        setattr(sys, name, outliving)
        if getattr(sys, f"__{name}__") is stream:
            setattr(sys, f"__{name}__", outliving)


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
