"""Finding the processes a test started, to prove none outlives its run."""

from __future__ import annotations

import os
from pathlib import Path

# Under pytest-xdist (`make test`), the other worker's runs start the same servers and agents:
# a process whose environment names another worker is that worker's, never this test's.
_WORKER = "PYTEST_XDIST_WORKER"


def live_processes(*markers: str, besides: str = "guardian") -> list[int]:
    """Live (not zombie) processes whose command line holds every marker, `besides` not."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        wanted = all(m in cmdline for m in markers) and besides not in cmdline
        if wanted and ") Z" not in stat and not _another_workers(entry):
            found.append(int(entry.name))
    return found


def _another_workers(entry: Path) -> bool:
    """The process was started under another xdist worker. One whose environment is not
    readable or names no worker (a server started with a scrubbed environment) is counted:
    the tests that start those keep to one file, and one file runs on one worker."""
    mine = os.environ.get(_WORKER)
    if mine is None:
        return False
    try:
        environ = (entry / "environ").read_bytes().split(b"\0")
    except OSError:
        return False
    prefix = f"{_WORKER}=".encode()
    theirs = next((item[len(prefix) :] for item in environ if item.startswith(prefix)), None)
    return theirs is not None and theirs != mine.encode()
