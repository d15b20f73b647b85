"""An ACP run's environment: the working copy the agent works in. Its state is the tree of the
working copy (relative path → content hash; `.git/`, `.venv/`, `node_modules/` and caches left
out; no mtimes), rehashed only where a file's size or mtime moved; its goal check is
`goal_check` (or an `env.py`'s `unmet`).

The agent's tool calls are not loopdeck's to run: they are recorded, keyed by the guard and,
when they write, approved. They are known by their ACP kind, each a tool spec here: reads
(`read`, `search`, `think`, `fetch`, `switch_mode`) and writes (everything else, and the
client's own `fs/write_text_file`, loopdeck's to gate and run).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from stat import S_ISREG
from typing import Any

from loopdeck.core.environment import Environment
from loopdeck.core.schema_args import args_model_for
from loopdeck.core.tools import ToolSpec
from loopdeck.workdir.goal_check import run_goal_check

READ_KINDS = ("read", "search", "think", "fetch", "switch_mode")
WRITE_KINDS = ("edit", "delete", "move", "execute", "other")
FS_WRITE = "fs_write_text_file"  # the agent asking loopdeck to write a file for it
# Why an operator's edit of an agent's own call is not offered: the agent runs its input.
AGENTS_OWN_INPUT = (
    "the agent runs its own input: an edit of its call cannot be applied; reject it and tell"
    " the agent what to do instead"
)
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
                    # A file loopdeck writes for the agent is written as approved, edits too.
                    not_editable="" if kind == FS_WRITE else AGENTS_OWN_INPUT,
                )
            )
        return specs

    def snapshot(self) -> dict[str, Any]:
        """The working copy's tree: each file's relative path and content hash."""
        seen: dict[str, tuple[int, int, str]] = {}
        _walk(self._hashes, seen, os.fspath(self.workdir), "")
        self._hashes = seen
        return {"files": {rel: seen[rel][2] for rel in sorted(seen)}}

    def unmet(self, snapshot: dict[str, Any]) -> list[str]:
        if self.goal_check is None:
            return ["this ACP env has no goal_check: nothing can say the goal is met"]
        return run_goal_check(self.goal_check, self.workdir, self.goal_check_timeout_s)


def _walk(
    known: dict[str, tuple[int, int, str]],
    seen: dict[str, tuple[int, int, str]],
    top: str,
    prefix: str,
) -> None:
    """Each file under `top` (as `os.walk` finds them: a link to a folder not followed, a
    skipped folder's name not entered) into `seen`, keyed `prefix` + its posix path; hashed
    again only where its size or mtime moved since `known`. Plain strings and `os.scandir`,
    no pathlib objects: the whole tree is walked for every tool call."""
    folders = [(top, prefix)]
    while folders:
        folder, prefix = folders.pop()
        try:
            entries = os.scandir(folder)
        except OSError:  # gone or unreadable: as os.walk, nothing from it
            continue
        with entries:
            for entry in entries:
                if _is_folder(entry):
                    if entry.name not in SKIPPED and not entry.is_symlink():
                        folders.append((entry.path, f"{prefix}{entry.name}/"))
                    continue
                try:
                    stat = entry.stat()  # a link's target, as Path.stat
                except OSError:
                    continue
                if not S_ISREG(stat.st_mode):  # a FIFO or a device: opening it would block
                    continue
                rel = prefix + entry.name
                was = known.get(rel)
                if was is not None and was[0] == stat.st_size and was[1] == stat.st_mtime_ns:
                    seen[rel] = was
                else:
                    seen[rel] = (stat.st_size, stat.st_mtime_ns, _digest(entry.path))


def _is_folder(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_dir()
    except OSError:  # os.walk takes it for a file
        return False


def _digest(path: str) -> str:
    hasher = hashlib.sha256()
    try:
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 16), b""):
                hasher.update(block)
    except OSError:
        return "unreadable"
    return hasher.hexdigest()[:16]
