"""An ACP run's environment: the working copy the agent works in. Its state is the tree of the
working copy (`workdir/tree.py`: relative path → content hash; `.git/`, `.venv/`,
`node_modules/` and caches left out; no mtimes), rehashed only where a file's size or mtime
moved; its goal check is `goal_check` (or an `env.py`'s `unmet`).

The agent's tool calls are not loopdeck's to run: they are recorded, keyed by the guard and,
when they write, approved. They are known by their ACP kind, each a tool spec here: reads
(`read`, `search`, `think`, `fetch`, `switch_mode`) and writes (everything else, and the
client's own `fs/write_text_file`, loopdeck's to gate and run).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from loopdeck.core.environment import Environment
from loopdeck.core.schema_args import args_model_for
from loopdeck.core.tools import ToolSpec
from loopdeck.workdir.goal_check import run_goal_check
from loopdeck.workdir.tree import FileTree

READ_KINDS = ("read", "search", "think", "fetch", "switch_mode")
WRITE_KINDS = ("edit", "delete", "move", "execute", "other")
FS_WRITE = "fs_write_text_file"  # the agent asking loopdeck to write a file for it
# Why an operator's edit of an agent's own call is not offered: the agent runs its input.
AGENTS_OWN_INPUT = (
    "the agent runs its own input: an edit of its call cannot be applied; reject it and tell"
    " the agent what to do instead"
)


def _agents_own(_: Any) -> Any:
    raise RuntimeError("an ACP agent runs its own tools; loopdeck records and approves them")


class WorkspaceEnvironment(Environment):
    def __init__(self, workdir: Path, data: dict[str, Any]) -> None:
        super().__init__(workdir, data)
        self.goal_check: list[str] | None = None
        self.goal_check_timeout_s = 60.0
        self._tree = FileTree(workdir)

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
                    # A file loopdeck writes for the agent is written as approved, edits too.
                    not_editable="" if kind == FS_WRITE else AGENTS_OWN_INPUT,
                )
            )
        return specs

    def snapshot(self) -> dict[str, Any]:
        """The working copy's tree: each file's relative path and content hash."""
        return self._tree.snapshot()

    def unmet(self, snapshot: dict[str, Any]) -> list[str]:
        if self.goal_check is None:
            return ["this ACP env has no goal_check: nothing can say the goal is met"]
        return run_goal_check(self.goal_check, self.workdir, self.goal_check_timeout_s)
