"""A daemon started the way servers start one, for the containment tests: fork, `setsid`, fork
again, so the daemon is in a session of its own and its starter is not its parent. It sleeps
for ever (`stubborn`: ignoring SIGTERM), its stdio on /dev/null, its pid written to a file.

    python tests/daemonize.py PIDFILE [stubborn] [exit|sleep]

as a command: starts the daemon, then exits (`exit`, the default) or sleeps for ever.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

MARK = "loopdeck-test-daemon"  # in every daemon's command line
SLEEP = "import signal, sys, time\nif sys.argv[1] == 'stubborn': signal.signal(15, signal.SIG_IGN)\n"
SLEEP += "time.sleep(10**6)"


def spawn_daemon(pidfile: Path, *, stubborn: bool = False) -> int:
    """Start the daemon; its pid, also written to `pidfile` (whole, by a rename)."""
    read, write = os.pipe()
    child = os.fork()
    if child == 0:
        try:
            os.close(read)
            os.setsid()
            if (daemon := os.fork()) == 0:
                null = os.open(os.devnull, os.O_RDWR)
                for fd in (0, 1, 2):
                    os.dup2(null, fd)
                mode = "stubborn" if stubborn else "meek"
                os.execv(sys.executable, [sys.executable, "-c", SLEEP, mode, MARK])
            os.write(write, str(daemon).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as said:
        pid = int(said.read())
    os.waitpid(child, 0)  # the middle process is gone: the daemon is an orphan
    partial = pidfile.with_name(pidfile.name + ".part")
    partial.write_text(str(pid))
    partial.rename(pidfile)
    return pid


def main(argv: list[str]) -> int:
    spawn_daemon(Path(argv[0]), stubborn="stubborn" in argv[1:])
    if "sleep" in argv[1:]:
        time.sleep(10**6)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
