"""A daemon started the way servers start one, for the containment tests: fork, `setsid`, fork
again, so the daemon is in a session of its own and its starter is not its parent. It sleeps
for ever (`stubborn`: ignoring SIGTERM), its stdio on /dev/null, its pid written to a file
once it is ready.

    python tests/daemonize.py PIDFILE [stubborn] [exit|sleep]

as a command: starts the daemon, waits until it is ready, then exits (`exit`, the default)
or sleeps for ever.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

MARK = "loopdeck-test-daemon"  # in every daemon's command line
# The daemon: SIGTERM ignored if stubborn, then its pid written (whole, by a rename): ready.
SLEEP = """import os, signal, sys, time
mode, pidfile = sys.argv[1:3]
if mode == "stubborn":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
with open(pidfile + ".part", "w") as part:
    part.write(str(os.getpid()))
os.rename(pidfile + ".part", pidfile)
time.sleep(10**6)
"""


def spawn_daemon(pidfile: Path, *, stubborn: bool = False) -> None:
    """Start the daemon; back once its middle process is gone (the daemon an orphan) and the
    daemon said it is ready (its pid in `pidfile`), or after 30 s."""
    child = os.fork()
    if child == 0:
        try:
            os.setsid()
            if os.fork() == 0:
                null = os.open(os.devnull, os.O_RDWR)
                for fd in (0, 1, 2):
                    os.dup2(null, fd)
                mode = "stubborn" if stubborn else "meek"
                os.execv(sys.executable, [sys.executable, "-c", SLEEP, mode, str(pidfile), MARK])
        finally:
            os._exit(0)
    os.waitpid(child, 0)
    end = time.monotonic() + 30
    while not pidfile.exists() and time.monotonic() < end:
        time.sleep(0.01)


def main(argv: list[str]) -> int:
    spawn_daemon(Path(argv[0]), stubborn="stubborn" in argv[1:])
    if "sleep" in argv[1:]:
        time.sleep(10**6)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
