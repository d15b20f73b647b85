"""An `[mcp]` env made for one run: its `env.py`'s `McpEnvironment` subclass, or the plain
one; its server started on the run's working copy (`{workdir}` put in every `[mcp]` value
and in `goal_check`), its stderr kept in a file beside the working copy."""

from __future__ import annotations

from pathlib import Path

from loopdeck.core.envdir import EnvDir, workdir_in
from loopdeck.core.scenario import ScenarioError
from loopdeck.mcp_env.config import mcp_config
from loopdeck.mcp_env.connection import ServerFailed
from loopdeck.mcp_env.environment import McpEnvironment


def open_mcp_env(env_dir: EnvDir, workdir: Path) -> McpEnvironment:
    scenario = env_dir.scenario
    where = env_dir.path / "scenario.toml"
    if env_dir.module is None:
        env = McpEnvironment(workdir, dict(scenario.data))
    else:
        made = env_dir.create(workdir)
        if not isinstance(made, McpEnvironment):
            raise ScenarioError(
                f"{env_dir.path / 'env.py'}: an [mcp] env's make_env() must return an"
                " McpEnvironment (from loopdeck.mcp_env import McpEnvironment)"
            )
        env = made
    envdir = env_dir.path.resolve()
    config = mcp_config(env_dir).in_workdir(workdir, envdir)
    check = workdir_in(scenario.goal_check, workdir, envdir) if scenario.goal_check else None
    errlog = workdir.parent / f"{workdir.name}.mcp-stderr.log"
    try:
        env.connect(config, errlog, check, scenario.goal_check_timeout_s)
    except (ServerFailed, ValueError) as exc:  # a server that fails, a schema that is not one
        env.close()
        raise ScenarioError(f"{where}: {exc}") from exc
    return env
