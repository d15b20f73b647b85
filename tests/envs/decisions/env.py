"""A test env for the operator's decisions beyond yes and no: file writes to edit and grant
(`write_file`), a transform that raises before it takes effect (an unknown outcome the
operator can resolve), and a write that fails definitely (`ToolError(..., applied=False)`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from loopdeck.core import Environment, ErrorCode, ToolError, tool


class FileArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: str
    content: str


class NameArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str


class Decisions(Environment):
    def __init__(self, workdir: Path, data: dict[str, Any]) -> None:
        super().__init__(workdir, data)
        self.files: dict[str, str] = {}
        self.transformed: list[str] = []
        self.transform_failures = int(data.get("transform_failures", 1))
        self.definite_failures = int(data.get("definite_failures", 1))
        self.runs: dict[str, int] = {}  # tool -> how many times its body ran to the end

    def snapshot(self) -> dict[str, Any]:
        return {"files": dict(self.files), "transformed": list(self.transformed)}

    def unmet(self, snapshot: dict[str, Any]) -> list[str]:
        return [] if "DONE" in snapshot["files"] else ["no DONE file yet"]

    def _ran(self, name: str) -> None:
        self.runs[name] = self.runs.get(name, 0) + 1

    @tool(args=FileArgs, risk="write", idempotency_fields=("path", "content"))
    def write_file(self, args: FileArgs) -> dict[str, Any]:
        """Write `content` to `path`."""
        self.files[args.path] = args.content
        self._ran("write_file")
        return {"written": args.path, "files": len(self.files)}

    @tool(args=NameArgs, risk="write")
    def transform(self, args: NameArgs) -> dict[str, Any]:
        """Transform `name`; its first runs raise ImportError before taking effect."""
        if self.transform_failures > 0:
            self.transform_failures -= 1
            raise ImportError("No module named 'transformers_plugin'")
        self.transformed.append(args.name)
        self._ran("transform")
        return {"transformed": args.name}

    @tool(args=NameArgs, risk="write")
    def publish(self, args: NameArgs) -> dict[str, Any]:
        """Publish `name`; its first runs fail definitely, without taking effect."""
        if self.definite_failures > 0:
            self.definite_failures -= 1
            raise ToolError(ErrorCode.CONFLICT, "the registry refused it", applied=False)
        self._ran("publish")
        return {"published": args.name}


def make_env(workdir: Path, data: dict[str, Any]) -> Decisions:
    return Decisions(workdir, data)
