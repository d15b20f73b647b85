"""An ACP run's environment: the working copy the agent works in. Its state is the tree of the
working copy (relative path → content hash; `.git/` left out; no mtimes), rehashed only where
a file's size or mtime moved; its goal check is `goal_check` (or an `env.py`'s `unmet`).

The agent's tool calls are not loopdeck's to run: they are recorded, keyed by the guard and,
when they write, approved. They are known by their ACP kind, each a tool spec here: reads
(`read`, `search`, `think`, `fetch`, `switch_mode`) and writes (everything else, and the
client's own `fs/write_text_file`, loopdeck's to gate and run).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

from loopdeck.core.environment import Environment
from loopdeck.core.tools import ToolSpec
from loopdeck.mcp_env.goal_check import run_goal_check
from loopdeck.mcp_env.schema_args import args_model_for

READ_KINDS = ("read", "search", "think", "fetch", "switch_mode")
WRITE_KINDS = ("edit", "delete", "move", "execute", "other")
FS_WRITE = "fs_write_text_file"  # the agent asking loopdeck to write a file for it
# Not the agent's work: a user's folder worked on in place may hold these, large and churning.
SKIPPED = frozenset(
    {".git", "__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache", ".venv", "node_modules"}
)


def _agents_own(_: Any) -> Any:
    raise RuntimeError("an ACP agent runs its own tools; loopdeck records and approves them")


class WorkspaceEnvironment(Environment):
    def __init__(self, workdir: Path, data: dict[str, Any]) -> None:
        super().__init__(workdir, data)
        self.goal_check: list[str] | None = None
        self.goal_check_timeout_s = 60.0
        self._hashes: dict[str, tuple[int, int, str]] = {}  # path -> (size, mtime_ns, hash)

    @property
    def goal_checked(self) -> bool:
        """Whether anything can say the goal is met: `goal_check`, or an `env.py`'s `unmet`."""
        return self.goal_check is not None or type(self).unmet is not WorkspaceEnvironment.unmet

    def tools(self) -> list[ToolSpec]:
        specs = []
        for kind in (*READ_KINDS, *WRITE_KINDS, FS_WRITE):
            risk = "read" if kind in READ_KINDS else "write"
            specs.append(
                ToolSpec(
                    name=kind,
                    description=f"the agent's {kind} tool calls",
                    args_model=args_model_for(kind, {"type": "object"}),
                    risk=risk,
                    risk_source="the agent's tool kind",
                    fn=_agents_own,
                )
            )
        return specs

    def snapshot(self) -> dict[str, Any]:
        """The working copy's tree: each file's relative path and content hash."""
        seen: dict[str, tuple[int, int, str]] = {}
        for folder, dirs, files in os.walk(self.workdir):
            dirs[:] = sorted(d for d in dirs if d not in SKIPPED)
            for name in files:
                path = Path(folder) / name
                rel = path.relative_to(self.workdir).as_posix()
                try:
                    stat = path.stat()
                except OSError:
                    continue
                known = self._hashes.get(rel)
                if known and known[:2] == (stat.st_size, stat.st_mtime_ns):
                    seen[rel] = known
                    continue
                seen[rel] = (stat.st_size, stat.st_mtime_ns, _digest(path))
        self._hashes = seen
        return {"files": {rel: entry[2] for rel, entry in sorted(seen.items())}}

    def unmet(self, snapshot: dict[str, Any]) -> list[str]:
        if self.goal_check is None:
            return ["this ACP env has no goal_check: nothing can say the goal is met"]
        return run_goal_check(self.goal_check, self.workdir, self.goal_check_timeout_s)


def _digest(path: Path) -> str:
    hasher = hashlib.sha256()
    try:
        with path.open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 16), b""):
                hasher.update(block)
    except OSError:
        return "unreadable"
    return hasher.hexdigest()[:16]
