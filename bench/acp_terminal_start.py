"""The price of running an ACP agent's terminal under loopdeck's guardian (its own process
group, ended if the runner dies): a command started by `Terminals.start` and waited to its end,
against the same command started bare with `asyncio.create_subprocess_exec`. The command is
`true` (nothing to do: only the start and the end are timed); the guardian is one more Python
interpreter per terminal. Medians of N each.

    .venv/bin/python bench/acp_terminal_start.py [N]
"""

from __future__ import annotations

import asyncio
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from loopdeck.acp_env.terminals import Terminals


async def bare(command: str, cwd: Path) -> float:
    started = time.perf_counter()
    proc = await asyncio.create_subprocess_exec(
        command, cwd=cwd, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE
    )
    await proc.communicate()
    return time.perf_counter() - started


async def guarded(terminals: Terminals, command: str, cwd: Path) -> float:
    started = time.perf_counter()
    terminal = await terminals.start(command, [], cwd, {}, None)
    await terminal.exited.wait()
    return time.perf_counter() - started


async def main(n: int) -> None:
    command = shutil.which("true") or "true"
    terminals = Terminals()
    with tempfile.TemporaryDirectory() as tmp:
        cwd = Path(tmp)
        bares = [await bare(command, cwd) for _ in range(n)]
        guards = [await guarded(terminals, command, cwd) for _ in range(n)]
    b, g = statistics.median(bares) * 1000, statistics.median(guards) * 1000
    print(f"terminal start to end, `true`, median of {n}:")
    print(f"  bare subprocess        {b:8.1f} ms")
    print(f"  under the guardian     {g:8.1f} ms   (+{g - b:.1f} ms a terminal)")


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 20))
