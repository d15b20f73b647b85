"""An env thread started ahead, for the next run's first env call (`EnvThread`).

Starting a thread waits for it to run (`Thread.start`): a run's first env call (the state it
plans on) took 0.4 ms at the median in a 20-step supervised run on a loaded 2-core machine, up
to 1.5 ms (q90), against 0.02 ms for the calls after it; on a quiet machine an idle core wakes
slower still. So one thread is kept started, waiting on its own queue, and a run's env thread
takes it. The next is started by a thread of its own (`loopdeck-env-starter`), never on a
run's loop, as the run that took one is done with its first env call (`refill`): while that
run lasts, so that what the start costs is the run's own, not whatever the process does next;
and not as the spare is taken, when the start held the interpreter's lock while the run's
first call waited for it. A process keeps spares once its second run found none (a `loopdeck
run` makes one run: no spare, no starter).

A spare is a new thread: it never ran env code, so nothing an earlier run's env code left on
its thread (a thread-local, a context variable, an event loop set for it) is on it. A thread
that served a run ends when its `EnvThread` is closed or dropped, as before: never reused. A
forked child never takes the parent's spare (its thread is not in the child): the child's copy
of its pipe is closed, and the child starts its own.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable

from loopdeck.core.env_jobs import Jobs

# A thread serving its queue, and the queue.
Serving = tuple[Jobs, threading.Thread]
# How long a taker waits for a spare being started (a start takes 0.03-2 ms on these machines).
MAKING_WAIT_S = 0.005


class Spares:
    """At most one started env thread kept ready (`take`); `make` starts one."""

    def __init__(self, make: Callable[[], Serving]) -> None:
        self._make = make
        self._lock = threading.Lock()
        self._made = threading.Condition(self._lock)  # notified as a spare is ready
        self._making = False  # the starter is starting one
        self._kept: Serving | None = None
        self._wanted: threading.Event | None = None  # the starter's, once it runs
        self._missed = 0  # takes that found no spare
        if hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=self._forked)

    def take(self) -> Serving | None:
        """The spare, if one is ready or being started (None: the caller starts its own, as
        before, and one is started for the next taker)."""
        with self._lock:
            if self._making:  # what is left of its start, less than a start of its own
                self._made.wait_for(lambda: not self._making, MAKING_WAIT_S)
            ready, self._kept = self._kept, None
        if ready is not None and ready[1].is_alive():
            return ready
        if ready is not None:
            ready[0].end()
        self._missed += 1
        return None

    def refill(self) -> None:
        """A spare started for the next taker, off this thread, unless one is ready; none
        before a second take found none (then the starter is started, once a process)."""
        with self._lock:
            wanted, starting = self._wanted, self._wanted is None and self._missed > 1
            if starting:
                wanted = self._wanted = threading.Event()
        if starting:
            threading.Thread(
                target=self._starting, args=(wanted,), name="loopdeck-env-starter", daemon=True
            ).start()
        if wanted is not None:
            wanted.set()

    def _starting(self, wanted: threading.Event) -> None:
        """The starter: a spare started each time one is wanted, until one waits."""
        while True:
            wanted.wait()
            wanted.clear()
            with self._lock:
                if self._kept is not None:
                    continue
                self._making = True
            made: Serving | None = None
            try:
                made = self._make()
            except (RuntimeError, OSError):  # no thread or pipe to be had: none is kept, and a
                made = None  # run's own start fails the same way, and says so where it is made
            finally:
                with self._lock:
                    self._making = False
                    if made is not None and self._kept is None and self._wanted is wanted:
                        self._kept, made = made, None
                    self._made.notify_all()
            if made is not None:  # a fork left this starter behind
                made[0].end()

    def _forked(self) -> None:
        """In a forked child: the parent's spare and starter are not here."""
        self._lock = threading.Lock()
        self._made = threading.Condition(self._lock)
        self._making = False
        self._missed = 0
        ready, self._kept, self._wanted = self._kept, None, None
        if ready is not None:
            ready[0].end()  # a forked copy: its pipe's ends closed here, the parent's left
