"""The MCP servers a test's own runs started: those below a runner (this test's process, or a
`loopdeck run` it started), so that another test session's servers on the same machine are
never signalled or waited for."""

from __future__ import annotations

from pathlib import Path

from process_helpers import live_processes


def _parent_of(pid: int) -> int:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0
    return int(stat.rsplit(")", 1)[1].split()[1])


def _below(pid: int, runner: int) -> bool:
    while pid > 1:
        pid = _parent_of(pid)
        if pid == runner:
            return True
    return False


def servers_below(runner: int, *markers: str) -> list[int]:
    """Live processes below `runner` whose command line holds every marker (no guardian)."""
    return [pid for pid in live_processes(*markers) if _below(pid, runner)]
