"""A gateway run made for one run: the folder as its environment, its goal check, and the loop
that starts the agent behind the gateway.

Two doors: an env folder with `[gateway]` (`open_gateway_env`: a fresh copy of its workspace,
`goal_check` with `{workdir}`, `{envdir}` and `{python}` put in, as in the agent's command), or
`loopdeck gateway` (`open_gateway_target`: the user's folder in place, `--check` its goal
check). The upstream's credentials are checked before anything starts.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path
from typing import Any

from loopdeck.core.envdir import EnvDir, workdir_in
from loopdeck.core.model import ModelReply, ModelRequest
from loopdeck.core.run_host import RunHost
from loopdeck.core.run_kind import LoopMaker
from loopdeck.core.scenario import ScenarioError
from loopdeck.gateway.config import (
    GatewaySettings,
    GatewayTarget,
    gateway_config,
    settings_of_env,
    settings_of_target,
)
from loopdeck.gateway.loop import GatewayLoop
from loopdeck.gateway.server import GatewayServer
from loopdeck.gateway.workspace import GatewayWorkspace
from loopdeck.llm.client import SCRIPTED, MissingCredentials, check_credentials, unroutable
from loopdeck.llm.loader import litellm_module
from loopdeck.workdir.agent_command import expanded

NO_CHECK = "the agent exited and no --check says whether the goal is met"


class AgentsOwnLoop:
    """A gateway run's model is its agent's: loopdeck calls none of its own."""

    context_window: int | None = None

    def __init__(self, name: str) -> None:
        self.name = name

    def count_tokens(self, messages: list[dict[str, Any]]) -> int:
        return 0

    async def prepare(self) -> None:
        """LiteLLM imported off the event loop before the run's clock starts: its first use
        is the agent's first call, which must not wait seconds for an import."""
        await asyncio.to_thread(litellm_module)

    async def complete(self, request: ModelRequest) -> ModelReply:
        raise RuntimeError("a gateway run calls no model of loopdeck's: its agent calls them")


def open_gateway_target(workdir: Path, target: GatewayTarget) -> tuple[GatewayWorkspace, LoopMaker]:
    """The user's folder, worked on in place (never copied, never removed)."""
    settings = _checked(settings_of_target(target), "--env", "--model")
    workspace = GatewayWorkspace(workdir, {})
    workspace.goal_check = target.check
    unchecked = None if target.check else NO_CHECK
    return workspace, _loop(settings, unchecked, target.served_by, target.token)


def open_gateway_env(env_dir: EnvDir, workdir: Path) -> tuple[GatewayWorkspace, LoopMaker]:
    scenario = env_dir.scenario
    envdir = env_dir.path.resolve()
    where = env_dir.path / "scenario.toml"
    config = gateway_config(env_dir)
    made = env_dir.create(workdir) if env_dir.module is not None else None
    if made is not None and not isinstance(made, GatewayWorkspace):
        raise ScenarioError(
            f"{env_dir.path / 'env.py'}: a [gateway] env's make_env must return a"
            " loopdeck.gateway.workspace.GatewayWorkspace"
        )
    workspace = made or GatewayWorkspace(workdir, dict(scenario.data))
    if scenario.goal_check is not None:
        workspace.goal_check = workdir_in(scenario.goal_check, workdir, envdir)
        workspace.goal_check_timeout_s = scenario.goal_check_timeout_s
    command = workdir_in(config.agent, workdir, envdir)
    settings = _checked(
        settings_of_env(env_dir, command), f"{where}: [gateway] env", f"{where}: [gateway] model"
    )
    return workspace, _loop(settings, None if workspace.goal_checked else NO_CHECK)


def _checked(settings: GatewaySettings, where: str, model_named: str) -> GatewaySettings:
    """The settings with `${VAR}` put in, the upstream named, routable by LiteLLM and its
    credentials present."""
    if (problem := upstream_problem(settings.model, settings.api_base, model_named)) is not None:
        raise ScenarioError(problem)
    try:
        env = expanded(settings.env, where)
    except ValueError as exc:
        raise ScenarioError(str(exc)) from None
    check_credentials(settings.model, settings.api_base)
    return replace(settings, env=env)


def upstream_problem(model: str, api_base: str | None, model_named: str) -> str | None:
    """Why a gateway cannot forward to `model`: loopdeck's scripted model, or a name LiteLLM
    routes nowhere; None when it can (its credentials are the serving host's to check)."""
    if model == SCRIPTED:
        return (
            "a gateway run needs an upstream model (--model, or [gateway] model): a LiteLLM"
            " model name such as anthropic/claude-sonnet-4-5; `scripted` is loopdeck's own loop's"
        )
    if (why := unroutable(model, api_base)) is not None:
        return f"{model_named} {model}: {why}"
    return None


def missing_credentials(model: str, api_base: str | None) -> str | None:
    """What the upstream lacks in this process's environment (its key), as LiteLLM says it;
    None when nothing is missing (or LiteLLM cannot tell)."""
    try:
        check_credentials(model, api_base)
    except MissingCredentials as missing:
        return str(missing)
    return None


def _loop(
    settings: GatewaySettings,
    unchecked: str | None,
    server: GatewayServer | None = None,
    token: str | None = None,
) -> LoopMaker:
    def loop(host: RunHost) -> GatewayLoop:
        return GatewayLoop(host, settings, unchecked, server, token)

    return loop
