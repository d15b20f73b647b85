"""A test env for decisions beyond yes and no: writes of files (edited, granted), a write
that breaks midway (its outcome unknown), and a read that holds until the test lets it go
(the run stays live while the operator acts)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from loopdeck.core import Environment, tool

HOLD_S = 15  # a test that never lets the hold go still ends


class FileArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: str
    text: str


class TextArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    text: str


class Decisions(Environment):
    def __init__(self, workdir: Path, data: dict[str, Any]) -> None:
        super().__init__(workdir, data)
        self.files: dict[str, str] = {}
        self.release = asyncio.Event()  # set by `let_go`: the hold returns
        self.holding: asyncio.AbstractEventLoop | None = None  # the loop the hold waits on

    def snapshot(self) -> dict[str, Any]:
        return {"files": dict(self.files)}

    def unmet(self, snapshot: dict[str, Any]) -> list[str]:
        if "done" in snapshot["files"].values():
            return []
        return ["no file says done"]

    @tool(args=FileArgs, risk="write")
    def write_file(self, args: FileArgs) -> dict[str, Any]:
        """Write a file."""
        self.files[args.path] = args.text
        return {"written": args.path}

    @tool(args=TextArgs, risk="write")
    def flaky_write(self, args: TextArgs) -> dict[str, Any]:
        """A write whose connection drops after the write went through."""
        self.files["flaky.txt"] = args.text
        raise ConnectionResetError("connection reset by peer after sending the write")

    @tool(timeout_s=HOLD_S + 5)
    async def hold(self, args: BaseModel) -> dict[str, Any]:
        """Waits until the test lets it go (or HOLD_S)."""
        self.holding = asyncio.get_running_loop()
        try:
            await asyncio.wait_for(self.release.wait(), HOLD_S)
        except TimeoutError:
            return {"released": False}
        return {"released": True}

    def let_go(self) -> None:
        """From the test's thread: the hold returns (an event set from another thread than
        its loop's would wake nothing there, and the hold would last its HOLD_S)."""
        assert self.holding is not None, "nothing is held"
        self.holding.call_soon_threadsafe(self.release.set)


def make_env(workdir: Path, data: dict[str, Any]) -> Environment:
    return Decisions(workdir, data)
