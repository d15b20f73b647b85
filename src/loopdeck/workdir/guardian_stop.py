"""A command run under loopdeck's guardian (`workdir/guardian.py`), ended from the runner's
side: one sequence for an ACP agent (`acp_env/agent_process.py`) and a gateway's agent
(`gateway/agent_process.py`). Kept out of `guardian.py`, which runs as a file importing only
what it needs to start."""

from __future__ import annotations

import asyncio
import contextlib
import signal

from loopdeck.workdir.guardian import end_cgroup

STOP_WAIT_S = 10.0  # the guardian's own end: its grace, then SIGKILL to what is left
KILL_WAIT_S = 3.0  # after SIGKILL to the guardian, for it to be gone


async def stop_guardian(proc: asyncio.subprocess.Process) -> None:
    """The guardian and everything below it gone when this returns (bounded): SIGTERM (the
    guardian ends what the command started), SIGKILL if it is still there after
    `STOP_WAIT_S`, and, when it did not finish its own end (a signal ended it), what it left
    in its cgroup ended here."""
    for sig, wait_s in ((signal.SIGTERM, STOP_WAIT_S), (signal.SIGKILL, KILL_WAIT_S)):
        if proc.returncode is not None:
            break
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(sig)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(wait_s):
                await proc.wait()
    if proc.returncode is not None and proc.returncode < 0:
        await asyncio.to_thread(end_cgroup, proc.pid)
