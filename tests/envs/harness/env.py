"""A test env whose tools misbehave on purpose: slow, flaky, broken, polling."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from loopdeck.core import Environment, ErrorCode, ToolError, tool


class TextArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    text: str


class SecondsArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    seconds: float


class NArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    n: int


class Harness(Environment):
    def __init__(self, workdir: Path, data: dict[str, Any]) -> None:
        super().__init__(workdir, data)
        self.notes: list[str] = []
        self.flaky_failures_left = int(data.get("flaky_failures", 2))
        self.slow_finished = 0
        self.polls = 0

    def snapshot(self) -> dict[str, Any]:
        return {"notes": list(self.notes)}

    def unmet(self, snapshot: dict[str, Any]) -> list[str]:
        return [] if "done" in snapshot["notes"] else ["no note says done"]

    @tool(args=SecondsArgs, timeout_s=5)
    async def slow(self, args: SecondsArgs) -> dict[str, Any]:
        """Sleep, then answer."""
        await asyncio.sleep(args.seconds)
        self.slow_finished += 1
        return {"slept": args.seconds}

    @tool(args=TextArgs)
    def echo(self, args: TextArgs) -> dict[str, Any]:
        """Echo the text."""
        return {"text": args.text}

    @tool()
    def flaky(self, args: BaseModel) -> dict[str, Any]:
        """Temporarily unavailable a few times, then fine."""
        if self.flaky_failures_left > 0:
            self.flaky_failures_left -= 1
            raise ToolError(ErrorCode.TEMPORARY_UNAVAILABLE, "backend busy")
        return {"ok": True}

    @tool(args=NArgs)
    def broken(self, args: NArgs) -> dict[str, Any]:
        """Always raises."""
        raise RuntimeError(f"broken tool, attempt {args.n}")

    @tool(exempt=True)
    def poll(self, args: BaseModel) -> dict[str, Any]:
        """Poll a job; exempt from the no-progress guard."""
        self.polls += 1
        return {"status": "running"}

    @tool(args=TextArgs, risk="write")
    def write_note(self, args: TextArgs) -> dict[str, Any]:
        """Append a note."""
        self.notes.append(args.text)
        return {"notes": len(self.notes)}

    @tool(args=SecondsArgs, risk="write", timeout_s=30)
    async def slow_write(self, args: SecondsArgs) -> dict[str, Any]:
        """A write that takes its time."""
        await asyncio.sleep(args.seconds)
        self.notes.append("done")
        return {"notes": len(self.notes)}

    @tool(args=TextArgs)
    def huge(self, args: TextArgs) -> dict[str, Any]:
        """Return a very large result."""
        return {"blob": args.text * 10_000}


def make_env(workdir: Path, data: dict[str, Any]) -> Environment:
    return Harness(workdir, data)
