"""`python -m loopdeck.mcp_env.guardian COMMAND…`: starts an MCP server so it never outlives
its runner, even one killed with SIGKILL.

The guardian asks the kernel for SIGTERM when its parent (the runner) dies
(`PR_SET_PDEATHSIG`), starts the server in a process group of its own with the guardian's own
stdin, stdout and stderr (the MCP client speaks to the server itself; nothing passes through
here), and waits. When the runner dies, or the guardian is told to stop, the server's whole
group (`npx` and the `node` it starts, say) gets SIGTERM, then SIGKILL after a grace period.
It exits with the server's status.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import time
from types import FrameType

GRACE_S = 2.0
PR_SET_PDEATHSIG = 1


def _on_parent_death() -> None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: the runner's own stop still ends it
        pass


def _end_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + GRACE_S
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.02)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)


def main(argv: list[str]) -> int:
    if not argv:
        print("guardian: no server command", file=sys.stderr)
        return 2
    parent = os.getppid()
    _on_parent_death()
    if os.getppid() != parent:  # the runner died before the request took hold
        return 1
    try:
        server = subprocess.Popen(argv, start_new_session=True)
    except OSError as exc:
        print(f"guardian: cannot start {argv[0]}: {exc}", file=sys.stderr)
        return 127

    def stop(signum: int, _frame: FrameType | None) -> None:
        _end_group(server.pid)
        sys.exit(128 + signum)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    status = server.wait()
    _end_group(server.pid)  # what the server left behind in its group
    return status if status >= 0 else 128 - status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
