"""A test env for store outages: a read that can repeat for ever and a write that says, in a
log outside the run (OUTAGE_LOG), each time it really ran."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from loopdeck.core import Environment, tool


class TextArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    text: str


class Outage(Environment):
    def __init__(self, workdir: Path, data: dict[str, Any]) -> None:
        super().__init__(workdir, data)
        self.notes: list[str] = []
        self.polls = 0

    def snapshot(self) -> dict[str, Any]:
        return {"notes": list(self.notes)}

    def unmet(self, snapshot: dict[str, Any]) -> list[str]:
        return [] if snapshot["notes"] else ["the note is not written"]

    @tool(exempt=True)
    def poll(self, args: BaseModel) -> dict[str, Any]:
        """Poll; nothing changes."""
        time.sleep(0.05)  # a stream, not a spin: the machine is shared
        self.polls += 1
        return {"polls": self.polls}

    @tool(args=TextArgs, risk="write")
    def note(self, args: TextArgs) -> dict[str, Any]:
        """Write the note."""
        log = os.environ.get("OUTAGE_LOG")
        if log:
            with open(log, "a", encoding="utf-8") as out:
                out.write(f"{os.getpid()} {time.time()} {args.text}\n")
        self.notes.append(args.text)
        return {"written": args.text}


def make_env(workdir: Path, data: dict[str, Any]) -> Environment:
    return Outage(workdir, data)
