"""A test env for the safety edges: slow and stray sync tools, a goal check that blocks,
results that are not JSON, errors that are huge, and a job that finishes while polled."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from loopdeck.core import Environment, ErrorCode, ToolError, tool


class TextArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    text: str


class SecondsArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    seconds: float = Field(ge=0)


class ReplicasArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    replicas: int = Field(ge=0, le=20)


class SizeArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    size: int = Field(ge=0, le=50_000_000)


class KindArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: str


class Edges(Environment):
    def __init__(self, workdir: Path, data: dict[str, Any]) -> None:
        super().__init__(workdir, data)
        self.notes: list[str] = []
        self.replicas = 1
        self.polls = 0
        self.goal_check_block_s = float(data.get("goal_check_block_s", 0))
        self.checks_running = 0  # goal checks in progress, for tests that act during one
        self.write_log = workdir / "writes.log"

    def snapshot(self) -> dict[str, Any]:
        job = "done" if self.polls >= 3 else "running"
        return {"notes": list(self.notes), "replicas": self.replicas, "job": job}

    def unmet(self, snapshot: dict[str, Any]) -> list[str]:
        self.checks_running += 1
        try:
            time.sleep(self.goal_check_block_s)  # a goal check that runs a slow suite
        finally:
            self.checks_running -= 1
        if "done" in snapshot["notes"] or snapshot["job"] == "done":
            return []
        return ["no note says done and the job is still running"]

    def _log_write(self, line: str) -> None:
        with self.write_log.open("a", encoding="utf-8") as log:
            log.write(line + "\n")

    @tool(args=SecondsArgs, risk="write", timeout_s=1)
    def sleepy_write(self, args: SecondsArgs) -> dict[str, Any]:
        """A write that takes `seconds`; it times out after 1 s but still takes effect."""
        time.sleep(args.seconds)
        self._log_write(f"sleepy_write {args.seconds}")
        self.notes.append("slept")
        return {"notes": len(self.notes)}

    @tool(args=SecondsArgs, timeout_s=1)
    def sleepy_read(self, args: SecondsArgs) -> dict[str, Any]:
        """A read that takes `seconds`; it times out after 1 s."""
        time.sleep(args.seconds)
        return {"slept": args.seconds}

    @tool(args=SecondsArgs, timeout_s=600)
    def long_read(self, args: SecondsArgs) -> dict[str, Any]:
        """A read that takes `seconds` and may outlive the run's deadline."""
        time.sleep(args.seconds)
        return {"slept": args.seconds}

    @tool(args=ReplicasArgs, risk="write")
    def set_replicas(self, args: ReplicasArgs) -> dict[str, Any]:
        """Set the replica count."""
        self._log_write(f"set_replicas {args.replicas!r}")
        self.replicas = args.replicas
        return {"replicas": self.replicas}

    @tool(args=TextArgs, risk="write")
    def write_note(self, args: TextArgs) -> dict[str, Any]:
        """Append a note."""
        self._log_write(f"write_note {args.text!r}")
        self.notes.append(args.text)
        return {"notes": len(self.notes)}

    @tool(args=SecondsArgs)
    def block_goal_check(self, args: SecondsArgs) -> dict[str, Any]:
        """From now on the goal check takes `seconds` (the env's slow test suite)."""
        self.goal_check_block_s = args.seconds
        return {"goal_check_s": args.seconds}

    @tool(args=SizeArgs)
    def shout(self, args: SizeArgs) -> dict[str, Any]:
        """Fails with an error message of `size` characters."""
        raise RuntimeError("x" * args.size)

    @tool(args=SizeArgs)
    def refuse_loudly(self, args: SizeArgs) -> dict[str, Any]:
        """Fails with a tool error of `size` characters."""
        raise ToolError(ErrorCode.CONFLICT, "y" * args.size)

    @tool(args=KindArgs)
    def odd_result(self, args: KindArgs) -> Any:
        """Returns something that is not JSON: tuple keys, a cycle or an object."""
        if args.kind == "cycle":
            loop: list[Any] = []
            loop.append(loop)
            return {"loop": loop}
        if args.kind == "object":  # its str ("<object object at 0x…>") tells the model nothing
            return {"thing": object()}
        return {(1, 2): "tuple key"}

    @tool(exempt=True)
    def poll_job(self, args: BaseModel) -> dict[str, Any]:
        """Poll the background job; exempt from the no-progress guard."""
        self.polls += 1
        return {"status": "done" if self.polls >= 3 else "running"}


def make_env(workdir: Path, data: dict[str, Any]) -> Environment:
    return Edges(workdir, data)
