"""An agent that never asks, run behind loopdeck's gateway, as a kind of run: the agent runs its
own loop on its own model calls, which reach the upstream only through the gateway. From a
`[gateway]` env folder (a fresh copy of its workspace) or from `loopdeck gateway`'s target
(the user's folder, in place)."""

from __future__ import annotations

from typing import Any

from loopdeck.core.envdir import EnvDir
from loopdeck.core.environment import Environment
from loopdeck.core.run_kind import OpenedRun, Opening
from loopdeck.core.scenario import ScenarioError
from loopdeck.gateway.config import TABLE, gateway_config, upstream_of
from loopdeck.workdir.agent_command import command_name

SERVED = "served"  # a served run's agent: started elsewhere, known by its token


def agent_name(command: list[str], upstream: str) -> str:
    """The run's model as named, the agent and the upstream it is answered by:
    `gateway claude (anthropic/claude-sonnet-4-5)`, `gateway served (openai/gpt-4o)`."""
    return f"gateway {command_name(command) if command else SERVED} ({upstream})"


class GatewayKind:
    name = "gateway"
    table = TABLE

    def check(self, env_dir: EnvDir) -> None:
        gateway_config(env_dir)
        if env_dir.module is None and env_dir.scenario.goal_check is None:
            raise ScenarioError(
                f"{env_dir.path / 'scenario.toml'}: a [gateway] env needs goal_check (the command"
                " that checks the goal in the working copy, exit 0: met), or env.py with unmet()"
            )

    def agent_name(self, env_dir: EnvDir | None, target: Any) -> str | None:
        if target is not None:
            return agent_name(target.command, target.model)
        assert env_dir is not None
        return agent_name(gateway_config(env_dir).agent, upstream_of(env_dir))

    def plays_scripts(self, env_dir: EnvDir) -> bool:
        return False  # the agent is real; its upstream may be a loopback playing a script

    def check_scripts(self, env_dir: EnvDir) -> None:
        return None

    def open(self, opening: Opening) -> OpenedRun:
        from loopdeck.gateway.opening import (
            AgentsOwnLoop,
            open_gateway_env,
            open_gateway_target,
        )

        env: Environment
        if opening.target is not None:
            env, loop = open_gateway_target(opening.workdir, opening.target)
        else:
            assert opening.env_dir is not None
            env, loop = open_gateway_env(opening.env_dir, opening.workdir)
        name = self.agent_name(opening.env_dir, opening.target) or "gateway"
        return OpenedRun(env, loop, AgentsOwnLoop(name))

    # -- `loopdeck gateway serve` and `token`, reached through the registry by the CLI ------
    def service(self, key: bytes, start_run: Any) -> Any:
        """The gateway for agents started elsewhere (`serving.GatewayService`)."""
        from loopdeck.gateway.serving import GatewayService

        return GatewayService(key, start_run)

    def token(self, claims: dict[str, Any], key: bytes) -> str:
        from loopdeck.gateway.tokens import issue

        return issue(claims, key)

    def upstream_problem(self, model: str, api_base: str | None) -> str | None:
        """Why a token's model could not be forwarded to (`opening.upstream_problem`)."""
        from loopdeck.gateway.opening import upstream_problem

        return upstream_problem(model, api_base, "--model")

    def missing_credentials(self, model: str, api_base: str | None) -> str | None:
        """What a token's upstream lacks in this environment (`opening.missing_credentials`):
        `serve`'s own is the one its run is checked in."""
        from loopdeck.gateway.opening import missing_credentials

        return missing_credentials(model, api_base)

    def key(self, path: Any) -> bytes:
        from loopdeck.gateway.tokens import key_at

        return key_at(path)


KIND = GatewayKind()
