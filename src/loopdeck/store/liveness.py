"""Is a run's runner alive? Decided so that a live run is never called crashed.

On the runner's own host the answer is the process table: the pid must exist, not as a
zombie, and have the start time recorded with the run (a reused pid is another process).
From another host the only evidence is the heartbeat, so a run is crashed only after a
silence long enough to be unambiguous (`LOOPDECK_CRASH_SILENCE_S`, default 30 s).
"""

from __future__ import annotations

import os
import socket
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from loopdeck import settings

if TYPE_CHECKING:
    from loopdeck.store.base import Store

HEARTBEAT_S = 1.0


def crash_silence_s() -> float:
    """How long a heartbeat may be silent (`Settings.crash_silence_s`; a value that cannot
    be read keeps the default, 30 s)."""
    return settings.current().crash_silence_s


def process_started(pid: int) -> str | None:
    """The kernel's start time of a process (Linux), or None where it cannot be read."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # Field 22, counted after the command name, which may itself hold spaces and parentheses.
    fields = stat[stat.rfind(")") + 2 :].split()
    return fields[19] if len(fields) > 19 else None


def process_state(pid: int) -> str | None:
    """The kernel's one-letter state of a process (Linux: `R`, `S`, `Z`…), or None where it
    cannot be read."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    after_name = stat[stat.rfind(")") + 2 :]
    return after_name[:1] or None


def pid_alive(pid: int) -> bool:
    """A zombie (killed, not yet reaped by its parent) still answers kill 0 but will never
    read another answer: it is gone."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return process_state(pid) not in ("Z", "X")


def runner_gone(row: Any, *, here: str, now: float, silence_s: float) -> str | None:
    """Why this live run's runner is known to be gone, or None while it may be alive."""
    pid, host = row["pid"], row["host"]
    if host == here and pid:
        if not pid_alive(pid):
            return f"runner pid {pid} on {host} is gone"
        started = row["pid_started"]
        if started and process_started(pid) not in (None, started):
            return f"runner pid {pid} on {host} is gone (the pid now belongs to another process)"
        return None
    beat = row["heartbeat_at"]
    if beat is None or now - beat > silence_s:
        return f"runner pid {pid} on {host} silent for more than {silence_s:.0f}s"
    return None


class Heartbeat:
    """Beats a run's heartbeat from its own thread and connection: neither a busy event loop
    nor blocking env code can starve it."""

    def __init__(self, store: Store, run_id: str, interval_s: float = HEARTBEAT_S) -> None:
        self.store = store
        self.run_id = run_id
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="loopdeck-heartbeat", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _beat(self) -> None:
        try:
            beats = self.store.open_beats(self.interval_s)
        except Exception:
            return  # the store is unusable: the writer reports that
        try:
            while not self._stop.wait(self.interval_s):
                try:
                    beats.beat(self.run_id, time.time())
                except Exception:
                    continue  # locked or unreachable for a moment: the next beat tries again
        finally:
            beats.close()


def this_host() -> str:
    """The host a runner records; LOOPDECK_HOST names it instead (containers whose hostnames
    repeat, or one machine standing in for many)."""
    return settings.current().host or socket.gethostname()
