"""A call goes down the path its recorded risk says: a change of a tool's risk that lands
while the call's state is read (an MCP server's tools changed) is the one its `CallProposed`
records and the one it runs as. It used to be read before the state and again after: a call
recorded as a write ran as a read, with no ask."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from conftest import Recorder

from loopdeck.core import Budget, Environment, RunConfig, Runtime, tool
from loopdeck.core.approvals import AutoApprover
from loopdeck.core.events import EventBus
from loopdeck.core.scenario import Script, ScriptTurn
from loopdeck.llm.client import LiteLLMModel


class Peeking(Environment):
    def snapshot(self) -> dict[str, Any]:
        return {"seen": 0}

    def unmet(self, snapshot: dict[str, Any]) -> list[str]:
        return ["never"]

    @tool(risk="read")
    def peek(self, args: Any) -> dict[str, Any]:
        """Look."""
        return {"ok": True}


async def test_a_risk_changed_while_the_state_is_read_is_the_one_recorded_and_run_as() -> None:
    script = Script(planner=["1. Peek."], executor=[ScriptTurn(tool="peek", args={})])
    budget = Budget(max_turns=2, max_tool_calls=1, deadline_s=60, max_rounds=1)
    config = RunConfig(env="e", model="scripted", goal="g", budget=budget, mode="react")
    bus, recorder = EventBus(), Recorder()
    bus.subscribe(recorder)
    rt = Runtime(config, Peeking(Path("."), {}), LiteLLMModel("scripted", script=script),
                 AutoApprover(), bus=bus)  # fmt: skip
    read_state = rt.state_hash

    async def state_read_as_the_server_changes_peek() -> str:
        hashed = await read_state()
        rt.tools["peek"] = rt.tools["peek"].model_copy(update={"risk": "write"})
        return hashed

    rt.state_hash = state_read_as_the_server_changes_peek  # type: ignore[method-assign]
    await rt.run()
    [proposed] = recorder.kinds("call_proposed")
    assert proposed.risk == "write"
    assert [e.call_id for e in recorder.kinds("approval_requested")] == [proposed.call_id]
