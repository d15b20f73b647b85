"""An ACP agent's run made for one run: its working copy as the environment, the goal check,
and the agent's command; the run's loop drives the agent (`AcpLoop`), started with the run and
stopped with it.

Two doors: an `[agent]` env folder (`open_acp_env`: a fresh copy of its workspace, its
`goal_check` with `{workdir}`, `{envdir}` and `{python}` put in, `{script}` in the agent's
command for loopdeck's scripted agent), or `loopdeck acp` (`open_acp_workdir`: the user's
folder in place, `--check` as the goal check). With nothing to check the goal, the operator
judges it after each turn (`AcpLoop`'s `unchecked`)."""

from __future__ import annotations

import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from loopdeck.acp_env.agent_process import AgentProcess
from loopdeck.acp_env.config import AgentConfig, agent_config
from loopdeck.acp_env.loop import AcpLoop
from loopdeck.acp_env.workspace import WorkspaceEnvironment
from loopdeck.core.envdir import EnvDir, workdir_in
from loopdeck.core.environment import Environment
from loopdeck.core.model import ModelReply, ModelRequest
from loopdeck.core.run_host import RunHost

LoopMaker = Callable[[RunHost], AcpLoop]
NO_GOAL_CHECK = (
    "the agent ended its turn and no goal_check in scenario.toml says whether the goal is met"
)
NO_CHECK = "the agent ended its turn and no --check says whether the goal is met"


class AgentsOwnModel:
    """An ACP run's model is the agent's own: loopdeck never calls one."""

    context_window: int | None = None

    def __init__(self, name: str) -> None:
        self.name = name

    def count_tokens(self, messages: list[dict[str, Any]]) -> int:
        return 0

    async def complete(self, request: ModelRequest) -> ModelReply:
        raise RuntimeError("an ACP run calls no model of loopdeck's: the agent has its own")


def open_acp_env(
    env_dir: EnvDir, workdir: Path, script: str | None
) -> tuple[Environment, LoopMaker]:
    scenario = env_dir.scenario
    agent = agent_config(env_dir)
    envdir = env_dir.path.resolve()
    env = env_dir.create(workdir) if env_dir.module is not None else None
    unchecked = None
    if env is None or isinstance(env, WorkspaceEnvironment):
        workspace = env or WorkspaceEnvironment(workdir, dict(scenario.data))
        if scenario.goal_check is not None:
            workspace.goal_check = workdir_in(scenario.goal_check, workdir, envdir)
            workspace.goal_check_timeout_s = scenario.goal_check_timeout_s
        unchecked = None if workspace.goal_checked else NO_GOAL_CHECK
        env = workspace
    command = [
        part.replace("{script}", script or "") for part in workdir_in(agent.acp, workdir, envdir)
    ]
    errlog = workdir.parent / f"{workdir.name}.agent-stderr.log"
    shown = env.shown_calls if isinstance(env, WorkspaceEnvironment) else None
    return env, _loop(command, workdir, errlog, agent, unchecked, shown)


def open_acp_workdir(
    workdir: Path, agent: AgentConfig, check: list[str] | None, check_timeout_s: float = 60.0
) -> tuple[WorkspaceEnvironment, LoopMaker]:
    """The user's folder, worked on in place (never copied, never removed), `check` its goal
    check; the agent's stderr kept beside loopdeck's other temporary files, not in the folder
    nor next to it."""
    workspace = WorkspaceEnvironment(workdir, {})
    workspace.goal_check = check
    workspace.goal_check_timeout_s = check_timeout_s
    errlog = Path(tempfile.gettempdir()) / f"loopdeck-acp-{uuid.uuid4().hex[:12]}.agent-stderr.log"
    unchecked = None if check else NO_CHECK
    return workspace, _loop(agent.acp, workdir, errlog, agent, unchecked, workspace.shown_calls)


def _loop(
    command: list[str],
    workdir: Path,
    errlog: Path,
    config: AgentConfig,
    unchecked: str | None,
    shown_calls: dict[str, tuple[Any, ...]] | None,
) -> LoopMaker:
    def loop(host: RunHost) -> AcpLoop:
        agent = AgentProcess(command, workdir, errlog)
        return AcpLoop(host, agent, config, unchecked, shown_calls)

    return loop
