"""An ACP agent that answers `session/new` with an error (Claude Code does, started as root
where IS_SANDBOX is set: its adapter asks for --dangerously-skip-permissions, which the CLI
refuses) stops the run `tool_failure` naming the agent and its words, never a crash."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import run_env

from loopdeck.core.states import StopReason

REFUSING_AGENT = """
import asyncio

from acp import PROTOCOL_VERSION, RequestError, run_agent
from acp.schema import AgentCapabilities, InitializeResponse


class Refuses:
    def on_connect(self, conn):
        pass

    async def initialize(self, protocol_version, client_capabilities=None, client_info=None, **kw):
        return InitializeResponse(protocol_version=PROTOCOL_VERSION,
                                  agent_capabilities=AgentCapabilities())

    async def new_session(self, cwd, **kw):
        raise RequestError.internal_error(
            {"details": "--dangerously-skip-permissions cannot be used with root/sudo privileges"})


asyncio.run(run_agent(Refuses()))
"""

SCENARIO = """
name = "refuses"
goal = "Anything."
mode = "react"
goal_check = ["{python}", "-c", "raise SystemExit(1)"]

[agent]
acp = ["{python}", "{envdir}/refuses.py"]

[[scripts.solve.turns]]
steps = [{ message = "not played" }]
"""


@pytest.mark.slow  # an agent process's start: seconds (make stress)
async def test_an_agent_refusing_its_session_stops_the_run_naming_it(tmp_path: Path) -> None:
    env = tmp_path / "refuses"
    (env / "workspace").mkdir(parents=True)
    (env / "refuses.py").write_text(REFUSING_AGENT, encoding="utf-8")
    (env / "scenario.toml").write_text(SCENARIO, encoding="utf-8")
    outcome, _ = await run_env(env, "solve")
    assert outcome.stop_reason is StopReason.TOOL_FAILURE, outcome.detail
    assert "refused to start" in outcome.detail
    assert "cannot be used with root/sudo privileges" in outcome.detail
