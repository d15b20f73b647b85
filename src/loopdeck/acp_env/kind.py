"""An ACP agent as a kind of run: the agent runs its own loop on its own model; loopdeck is its
client. From an `[agent]` env folder (a fresh copy of its workspace) or from `loopdeck acp`'s
target (the user's folder, in place)."""

from __future__ import annotations

from typing import Any

from loopdeck.acp_env.config import TABLE, AgentConfig, agent_config, agent_turns
from loopdeck.core.envdir import EnvDir
from loopdeck.core.environment import Environment
from loopdeck.core.run_kind import OpenedRun, Opening
from loopdeck.core.scenario import ScenarioError
from loopdeck.workdir.agent_command import command_name


def agent_name(command: list[str]) -> str:
    """An ACP agent as the run's model is named: `acp gemini-cli`, `acp scripted_agent`."""
    return "acp " + command_name(command)


def plays_a_script(agent: AgentConfig) -> bool:
    """Only loopdeck's scripted agent plays a script: its command takes one as `{script}`."""
    return any("{script}" in part for part in agent.acp)


class AcpKind:
    name = "acp"
    table = TABLE

    def check(self, env_dir: EnvDir) -> None:
        agent_config(env_dir)
        where = env_dir.path / "scenario.toml"
        for name, script in env_dir.scenario.scripts.items():
            agent_turns(where, name, script.turns)
        if env_dir.module is None and env_dir.scenario.goal_check is None:
            raise ScenarioError(
                f"{env_dir.path / 'scenario.toml'}: an [agent] env needs goal_check (the command"
                " that checks the goal in the working copy, exit 0: met), or env.py with unmet()"
            )

    def agent_name(self, env_dir: EnvDir | None, target: Any) -> str | None:
        if target is not None:
            return agent_name(target.command)
        assert env_dir is not None
        return agent_name(agent_config(env_dir).acp)

    def plays_scripts(self, env_dir: EnvDir) -> bool:
        return plays_a_script(agent_config(env_dir))

    def check_scripts(self, env_dir: EnvDir) -> None:
        return None  # checked as each run is prepared, once its tools are known

    def open(self, opening: Opening) -> OpenedRun:
        from loopdeck.acp_env.opening import AgentsOwnModel, open_acp_env, open_acp_workdir

        target = opening.target
        env: Environment
        if target is not None:
            try:
                agent = AgentConfig(acp=target.command, mode=target.mode, env=target.env)
            except ValueError as exc:
                raise ScenarioError(f"the agent's command or --env: {exc}") from exc
            env, loop = open_acp_workdir(opening.workdir, agent, target.check)
        else:
            assert opening.env_dir is not None
            env, loop = open_acp_env(opening.env_dir, opening.workdir, opening.script_name)
        name = self.agent_name(opening.env_dir, target) or "acp"
        return OpenedRun(env, loop, AgentsOwnModel(name))


KIND = AcpKind()
