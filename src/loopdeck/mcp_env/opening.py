"""An `[mcp]` env made for one run: its `env.py`'s `McpEnvironment` subclass, or the plain
one; its server started on the run's working copy (`{workdir}` put in every `[mcp]` value
and in `goal_check`), its stderr kept in a file beside the working copy.

`loopdeck check` starts the server once too, whenever the scenario names what the server must
have (a `[mcp.tools.NAME]` override, a snapshot entry, a script's call): every problem `run`
would refuse is said together, whether or not a script declares what it ends with."""

from __future__ import annotations

import shutil
from pathlib import Path

from loopdeck.core.envdir import EnvDir, workdir_in, workdir_in_script
from loopdeck.core.scenario import ScenarioError
from loopdeck.core.script_check import check_script
from loopdeck.mcp_env.config import mcp_config
from loopdeck.mcp_env.connection import ServerFailed
from loopdeck.mcp_env.environment import McpEnvironment, Refused


def open_mcp_env(env_dir: EnvDir, workdir: Path) -> McpEnvironment:
    env = _made(env_dir, workdir)
    try:
        _connect(env, env_dir, workdir)
    except Refused as refused:
        env.close()
        raise ScenarioError(_said(env_dir, refused.problems)) from refused
    except (ServerFailed, ValueError) as exc:  # a server that fails, a schema that is not one
        env.close()
        raise ScenarioError(_said(env_dir, [str(exc)])) from exc
    return env


def check_against_server(env_dir: EnvDir) -> None:
    """The server started once on a scratch copy of the workspace, when the scenario names
    anything it must have: every override and snapshot entry it refuses, and every script
    call it has no tool for (or whose arguments its schema refuses), said together
    (`ScenarioError`); nothing when all hold."""
    config, scripts = mcp_config(env_dir), env_dir.scenario.scripts
    calls = any(turn.tool or turn.calls for script in scripts.values() for turn in script.executor)
    if not (config.tools or isinstance(config.snapshot, list) or calls):
        return
    workdir = env_dir.prepare_workdir()
    env = None
    try:
        env = _made(env_dir, workdir)
        try:
            _connect(env, env_dir, workdir)
            problems = []
        except Refused as refused:
            problems = refused.problems
        except (ServerFailed, ValueError) as exc:
            raise ScenarioError(_said(env_dir, [str(exc)])) from exc
        said = _said(env_dir, problems)
        tools = {spec.name: spec for spec in env.tools()}
        for name, script in sorted(scripts.items()):
            try:
                played = workdir_in_script(script, workdir)  # as `run` plays it
                check_script(env_dir.path / "scenario.toml", name, played, tools)
            except ScenarioError as refused_script:
                said = "\n".join(part for part in (said, str(refused_script)) if part)
    finally:
        if env is not None:
            env.close()
        shutil.rmtree(workdir, ignore_errors=True)
    if said:
        raise ScenarioError(said)


def _made(env_dir: EnvDir, workdir: Path) -> McpEnvironment:
    if env_dir.module is None:
        return McpEnvironment(workdir, dict(env_dir.scenario.data))
    made = env_dir.create(workdir)
    if not isinstance(made, McpEnvironment):
        raise ScenarioError(
            f"{env_dir.path / 'env.py'}: an [mcp] env's make_env() must return an"
            " McpEnvironment (from loopdeck.mcp_env import McpEnvironment)"
        )
    return made


def _connect(env: McpEnvironment, env_dir: EnvDir, workdir: Path) -> None:
    scenario = env_dir.scenario
    envdir = env_dir.path.resolve()
    config = mcp_config(env_dir).in_workdir(workdir, envdir)
    check = workdir_in(scenario.goal_check, workdir, envdir) if scenario.goal_check else None
    errlog = workdir.parent / f"{workdir.name}.mcp-stderr.log"
    env.connect(config, errlog, check, scenario.goal_check_timeout_s)


def _said(env_dir: EnvDir, problems: list[str]) -> str:
    """Each problem on a line of its own, naming the scenario it is in."""
    where = env_dir.path / "scenario.toml"
    return "\n".join(f"{where}: {problem}" for problem in problems)
