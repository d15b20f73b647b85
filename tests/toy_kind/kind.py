"""The toy kind: `[toy]` in scenario.toml names notes its own agent writes into the working
copy, one a turn, each a write asked through the run's host (the one approval loop), the
goal check a file's presence. Its agent never asks loopdeck's model anything; its loop knows
nothing of the runtime but its `RunHost`."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from loopdeck.core.envdir import EnvDir
from loopdeck.core.environment import Environment
from loopdeck.core.events import CallStatus
from loopdeck.core.review import findings_or_stop
from loopdeck.core.run_host import RunHost
from loopdeck.core.run_kind import OpenedRun, Opening
from loopdeck.core.scenario import ScenarioError
from loopdeck.core.tools import ToolSpec
from loopdeck.core.write_approvals import Approved, Rejected


class NoteArgs(BaseModel):
    name: str
    text: str


class ToyModel:
    name = "toy agent"
    context_window = None

    def count_tokens(self, messages: list[dict[str, Any]]) -> int:
        return 0

    async def complete(self, request: Any) -> Any:
        raise RuntimeError("the toy agent has its own mind")


class Notes(Environment):
    def tools(self) -> list[ToolSpec]:
        return [
            ToolSpec(
                name="note",
                description="a note",
                args_model=NoteArgs,
                risk="write",
                fn=lambda args: None,
                not_editable=os.environ.get("TOY_NOT_EDITABLE", ""),
            )
        ]

    def snapshot(self) -> dict[str, Any]:
        files = {p.name: p.read_text() for p in sorted(self.workdir.glob("*.txt"))}
        return {"files": files}

    def unmet(self, snapshot: dict[str, Any]) -> list[str]:
        return [] if "done.txt" in snapshot["files"] else ["done.txt is not written"]


class ToyLoop:
    def __init__(self, host: RunHost, notes: list[dict[str, str]]) -> None:
        self.host, self.notes = host, notes

    async def run(self) -> None:
        host = self.host
        for note in self.notes:
            await host.start_round()
            before = await host.snapshot()
            host.turn_started()
            record, _ = await host.propose("note", note["name"], dict(note))

            async def write(got: Approved) -> Approved:
                Path(host.workdir, got.args["name"]).write_text(got.args["text"])
                return got

            done = await host.until_held(record, "the toy agent writes a note", write)
            status = CallStatus.REJECTED if isinstance(done, Rejected) else CallStatus.EXECUTED
            host.finish(record, status, {"ok": status is CallStatus.EXECUTED})
            host.turn_ended(tokens=1, cost_usd=0.0, latency_ms=0.0, said=note["name"])
            findings_or_stop(await host.review_round(before))


class ToyKind:
    name = "toy"
    table = "toy"

    def check(self, env_dir: EnvDir) -> None:
        if not env_dir.scenario.tables["toy"].get("notes"):
            raise ScenarioError(f"{env_dir.path / 'scenario.toml'}: [toy] has no notes")

    def agent_name(self, env_dir: EnvDir | None, target: Any) -> str | None:
        return "toy agent"

    def plays_scripts(self, env_dir: EnvDir) -> bool:
        return False

    def check_scripts(self, env_dir: EnvDir) -> None:
        return None

    def open(self, opening: Opening) -> OpenedRun:
        assert opening.env_dir is not None
        notes = opening.env_dir.scenario.tables["toy"]["notes"]
        env = Notes(opening.workdir, {})
        return OpenedRun(env, lambda host: ToyLoop(host, notes), ToyModel())


KIND = ToyKind()
