"""An `[agent]` env made for one run: its working copy as the environment (or its `env.py`'s),
`goal_check` with `{workdir}`, `{envdir}` and `{python}` put in, and the agent's command with
`{script}` too (loopdeck's scripted agent plays that script); the run's loop drives the agent
(`AcpLoop`), started with the run and stopped with it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from loopdeck.acp_env.agent_process import AgentProcess
from loopdeck.acp_env.loop import AcpLoop
from loopdeck.acp_env.workspace import WorkspaceEnvironment
from loopdeck.core.envdir import EnvDir
from loopdeck.core.environment import Environment
from loopdeck.core.mcp_config import workdir_in
from loopdeck.core.model import ModelReply, ModelRequest
from loopdeck.core.runtime import Runtime


class AgentsOwnModel:
    """An ACP run's model is the agent's own: loopdeck never calls one."""

    context_window: int | None = None

    def __init__(self, name: str) -> None:
        self.name = name

    def count_tokens(self, messages: list[dict[str, Any]]) -> int:
        return 0

    async def complete(self, request: ModelRequest) -> ModelReply:
        raise RuntimeError("an ACP run calls no model of loopdeck's: the agent has its own")


def acp_model_name(env_dir: EnvDir) -> str:
    assert env_dir.scenario.agent is not None
    return "acp " + Path(env_dir.scenario.agent.acp[0]).name


def open_acp_env(
    env_dir: EnvDir, workdir: Path, script: str | None
) -> tuple[Environment, Callable[[Runtime], AcpLoop]]:
    scenario = env_dir.scenario
    assert scenario.agent is not None
    envdir = env_dir.path.resolve()
    env = env_dir.create(workdir) if env_dir.module is not None else None
    if env is None or isinstance(env, WorkspaceEnvironment):
        workspace = env or WorkspaceEnvironment(workdir, dict(scenario.data))
        if scenario.goal_check is not None:
            workspace.goal_check = workdir_in(scenario.goal_check, workdir, envdir)
            workspace.goal_check_timeout_s = scenario.goal_check_timeout_s
        env = workspace
    command = [
        part.replace("{script}", script or "")
        for part in workdir_in(scenario.agent.acp, workdir, envdir)
    ]
    errlog = workdir.parent / f"{workdir.name}.agent-stderr.log"
    config = scenario.agent

    def loop(rt: Runtime) -> AcpLoop:
        return AcpLoop(rt, AgentProcess(command, workdir, errlog), config)

    return env, loop
