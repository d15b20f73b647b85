"""repo_triage: a seeded calculator repo with three failing tests.

The goal check runs the suite itself; the agent's word that it passes counts for nothing.
Each run works on its own copy of `workspace/`.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from loopdeck.core import Environment, ErrorCode, ToolError, tool


class PathArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: str = Field(min_length=1)


class WriteArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: str = Field(min_length=1)
    content: str


class RepoTriage(Environment):
    def __init__(self, workdir: Path, data: dict[str, Any]) -> None:
        super().__init__(workdir, data)
        self._verdicts: dict[str, list[str]] = {}

    def _resolve(self, relative: str) -> Path:
        target = (self.workdir / relative).resolve()
        if not target.is_relative_to(self.workdir.resolve()):
            raise ToolError(ErrorCode.PERMISSION_DENIED, f"{relative} is outside the repository")
        return target

    def _sources(self) -> list[Path]:
        return sorted(p for p in self.workdir.rglob("*.py") if "__pycache__" not in p.parts)

    def snapshot(self) -> dict[str, Any]:
        return {
            str(p.relative_to(self.workdir)): hashlib.sha256(p.read_bytes()).hexdigest()[:16]
            for p in self._sources()
        }

    def _pytest(self) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "pytest", "-rf"],
            cwd=self.workdir,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    def unmet(self, snapshot: dict[str, Any]) -> list[str]:
        key = hashlib.sha256(repr(sorted(snapshot.items())).encode()).hexdigest()
        if key not in self._verdicts:
            proc = self._pytest()
            failed = [
                line.split(" - ")[0].removeprefix("FAILED ").strip()
                for line in proc.stdout.splitlines()
                if line.startswith("FAILED ")
            ]
            if proc.returncode != 0 and not failed:
                failed = [f"pytest exited {proc.returncode}"]
            self._verdicts[key] = [f"failing: {name}" for name in failed]
        return self._verdicts[key]

    @tool(timeout_s=90)
    def run_pytest(self, args: BaseModel) -> dict[str, Any]:
        """Run the repository's test suite; returns the exit code and pytest's summary."""
        proc = self._pytest()
        lines = proc.stdout.strip().splitlines()
        return {
            "exit_code": proc.returncode,
            "summary": lines[-1] if lines else "",
            "output": proc.stdout[-3000:],
        }

    @tool(args=PathArgs)
    def read_file(self, args: PathArgs) -> dict[str, Any]:
        """Read a text file of the repository."""
        target = self._resolve(args.path)
        if not target.is_file():
            raise ToolError(ErrorCode.NOT_FOUND, f"no file {args.path}")
        return {"path": args.path, "content": target.read_text(encoding="utf-8")}

    @tool(args=WriteArgs, risk="write")
    def write_file(self, args: WriteArgs) -> dict[str, Any]:
        """Replace a file of the repository with new content. Needs the operator's approval."""
        target = self._resolve(args.path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(args.content, encoding="utf-8")
        return {"path": args.path, "bytes": len(args.content.encode())}


def make_env(workdir: Path, data: dict[str, Any]) -> Environment:
    return RepoTriage(workdir, data)
