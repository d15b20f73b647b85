"""A test env whose state a test can move from outside: the snapshot reads a "world" file
(`NOTIFY_WORLD`, else none) besides the working copy's `notes.txt`, so a write approved through
a link finds its state moved at dispatch and is asked again."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from loopdeck.core import Environment, tool


class FileArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: str
    content: str


class World(Environment):
    def __init__(self, workdir: Path, data: dict[str, Any]) -> None:
        super().__init__(workdir, data)
        world = os.environ.get("NOTIFY_WORLD")
        self.world = Path(world) if world else None
        self.writes = workdir / "writes.log"

    def snapshot(self) -> dict[str, Any]:
        notes = self.workdir / "notes.txt"
        world = self.world.read_text() if self.world and self.world.exists() else ""
        return {"notes": notes.read_text() if notes.exists() else "", "world": world}

    def unmet(self, snapshot: dict[str, Any]) -> list[str]:
        return [] if "done" in snapshot["notes"] else ["notes.txt does not say done"]

    @tool(args=FileArgs, risk="write")
    def write_file(self, args: FileArgs) -> dict[str, Any]:
        """Write a file of the working copy."""
        (self.workdir / args.path).write_text(args.content)
        with self.writes.open("a") as log:
            log.write(f"{args.path}\n")
        if self.world is not None:  # what the test reads: every write that landed
            with self.world.with_suffix(".writes").open("a") as log:
                log.write(f"{args.path}\n")
        return {"written": args.path}


def make_env(workdir: Path, data: dict[str, Any]) -> World:
    return World(workdir, data)
