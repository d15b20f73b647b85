"""The environment of a run whose agent works in a folder in place and runs its own tools (an
ACP agent, a gateway's agent): the folder's state and its goal check, shared by both kinds.

Its state is the folder's tree (`workdir/tree.py`: relative path -> content hash; `.git/`,
`.venv/`, `node_modules/` and caches left out; no mtimes), rehashed only where a file's size
or mtime moved. Its goal check is `goal_check` (a command run in the folder), or an `env.py`'s
`unmet`; with neither, nothing can say the goal is met, and `unmet` says so in the kind's words
(`no_check`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from loopdeck.core.environment import Environment
from loopdeck.workdir.goal_check import run_goal_check
from loopdeck.workdir.tree import FileTree


class WorkingCopy(Environment):
    no_check = "nothing checks this run's goal: no goal_check"

    def __init__(self, workdir: Path, data: dict[str, Any]) -> None:
        super().__init__(workdir, data)
        self.goal_check: list[str] | None = None
        self.goal_check_timeout_s = 60.0
        self._tree = FileTree(workdir)

    @property
    def goal_checked(self) -> bool:
        """Whether anything can say the goal is met: `goal_check`, or an `env.py`'s `unmet`."""
        return self.goal_check is not None or type(self).unmet is not WorkingCopy.unmet

    def snapshot(self) -> dict[str, Any]:
        """The working copy's tree: each file's relative path and content hash."""
        return self._tree.snapshot()

    def unmet(self, snapshot: dict[str, Any]) -> list[str]:
        if self.goal_check is None:
            return [self.no_check]
        return run_goal_check(self.goal_check, self.workdir, self.goal_check_timeout_s)
