"""From an env folder and the operator's options to a ready Runtime on its own workspace; or,
for `loopdeck acp`, from an ACP agent's command to a Runtime on the user's folder in place."""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import ValidationError

from loopdeck.bundled import bundled_folder
from loopdeck.core.agent_script import AgentConfig
from loopdeck.core.approvals import Answerer, Approver
from loopdeck.core.budgets import Budget
from loopdeck.core.envdir import EnvDir, find_env_dirs, load_env_dir
from loopdeck.core.environment import Environment
from loopdeck.core.events import EventBus
from loopdeck.core.runtime import RunConfig, Runtime
from loopdeck.core.scenario import Scenario, ScenarioError, Script, workdir_in_script
from loopdeck.core.script_check import check_script
from loopdeck.llm.client import SCRIPTED, LiteLLMModel, check_credentials
from loopdeck.llm.profile import UnsupportedLayer
from loopdeck.operator.approval_queue import ApprovalQueue
from loopdeck.operator.approving import ApproveMode, deciders
from loopdeck.store.approver import Recording

BUDGET_FLAGS = {
    "max_turns": "max_turns",
    "max_tool_calls": "max_tool_calls",
    "max_tokens": "max_tokens",
    "max_cost": "max_cost_usd",
    "deadline": "deadline_s",
    "max_rounds": "max_rounds",
}


def sample_envs_root() -> Path:
    """The sample envs inside the package (LOOPDECK_SAMPLE_ENVS names another folder)."""
    configured = os.environ.get("LOOPDECK_SAMPLE_ENVS")
    return Path(configured) if configured else bundled_folder("sample_envs")


def resolve_env_dir(spec: str, settings: list[str] | None = None) -> EnvDir:
    """An env by path (`./my_env`), or a bundled sample env by name (`service_outage`)."""
    path = Path(spec).expanduser()
    root = sample_envs_root()
    if not path.is_dir() and (root / spec).is_dir():
        path = root / spec
    return load_env_dir(path, known_root=root, settings=settings)


@dataclass(frozen=True)
class AcpTarget:
    """`loopdeck acp`: an ACP agent on the user's folder, worked on in place, no env folder."""

    goal: str
    workdir: Path
    command: list[str]  # the agent's, run without a shell
    check: list[str] | None = None  # the goal check (exit 0: met); None: the operator judges
    mode: str | None = None  # the ACP session mode to set
    env: dict[str, str] = field(default_factory=dict)  # added to the agent's; `${VAR}` allowed


@dataclass
class RunOptions:
    env: str
    script: str | None = None
    model: str | None = None
    api_base: str | None = None
    mode: Literal["rounds", "react"] | None = None
    approve: ApproveMode | None = None
    budget_overrides: dict[str, Any] = field(default_factory=dict)
    run_id: str | None = None
    model_timeout_s: float | None = None
    pause_at: float | None = None
    settings: list[str] = field(default_factory=list)  # `--set KEY=VALUE`, scenario.toml
    # Told what the preparation waits for, in words (the console's first frame says it).
    phase: Callable[[str], None] | None = None
    acp: AcpTarget | None = None  # `loopdeck acp`: no env folder (`env` is only its name)


@dataclass
class PreparedRun:
    env_dir: EnvDir | None  # None: `loopdeck acp`
    runtime: Runtime
    workdir: Path
    queue: ApprovalQueue | None = None  # the console's, when it decides (`approving.deciders`)
    # A temporary copy is the run's to remove; the user's folder (`loopdeck acp`) never is.
    owns_workdir: bool = True

    def cleanup(self) -> None:
        self.runtime.env.close()
        if self.owns_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)


def prepare_run(
    options: RunOptions,
    approver: Approver | None = None,
    bus: EventBus | None = None,
    answerer: Answerer | None = None,
    *,
    console: bool = False,
    recording: Recording | None = None,
) -> PreparedRun:
    """The run `options` name, on a fresh copy of its env's workspace. Its approver (unless
    given) is chosen by `operator.approving.deciders`: the console's queue when `console`,
    raced with the store when `recording`."""
    if options.acp is not None:
        return prepare_acp_run(
            options, options.acp, approver, bus, answerer, console=console, recording=recording
        )
    env_dir = resolve_env_dir(options.env, options.settings)
    scenario = env_dir.scenario
    acp = scenario.agent is not None
    model_name = options.model or scenario.model
    if scenario.agent is not None:
        model_name = agent_name(scenario.agent.acp)
    # An agent plays a script only when it is loopdeck's scripted one.
    scripted_agent = scenario.agent is not None and plays_a_script(scenario.agent)
    script_name = _script_name(options, env_dir, SCRIPTED if scripted_agent else model_name)
    script = env_dir.script(script_name) if model_name == SCRIPTED and script_name else None
    if acp and script_name:
        env_dir.script(script_name)  # the scripted agent's script: named now if it is not there
    queue = None
    if approver is None:
        chosen = deciders(options.approve, model=model_name, console=console, recording=recording)
        approver, answerer, queue = chosen.approver, answerer or chosen.answerer, chosen.queue
    config = _config(options, scenario, script_name, model_name)
    workdir = env_dir.prepare_workdir()
    env: Environment | None = None
    try:
        if acp:
            from loopdeck.acp_env.opening import AgentsOwnModel, open_acp_env

            env, loop = open_acp_env(env_dir, workdir, script_name)
            runtime = Runtime(config, env, AgentsOwnModel(model_name), approver, bus=bus,
                              answerer=answerer, agent_loop=loop)  # fmt: skip
            return PreparedRun(env_dir=env_dir, runtime=runtime, workdir=workdir, queue=queue)
        if script is not None and env_dir.scenario.mcp is not None:
            script = workdir_in_script(script, workdir)
        model = _model(options, env_dir, config, script)
        if env_dir.scenario.mcp is not None and options.phase is not None:
            options.phase("starting the env's MCP server and listing its tools…")
        env = _env(env_dir, workdir)
        if script is not None and script_name is not None:
            tools = {spec.name: spec for spec in env.tools()}
            check_script(env_dir.path / "scenario.toml", script_name, script, tools)
    except Exception:
        if env is not None:
            env.close()
        shutil.rmtree(workdir, ignore_errors=True)
        raise
    runtime = Runtime(config, env, model, approver, bus=bus, answerer=answerer)
    return PreparedRun(env_dir=env_dir, runtime=runtime, workdir=workdir, queue=queue)


def prepare_acp_run(
    options: RunOptions,
    target: AcpTarget,
    approver: Approver | None = None,
    bus: EventBus | None = None,
    answerer: Answerer | None = None,
    *,
    console: bool = False,
    recording: Recording | None = None,
) -> PreparedRun:
    """`loopdeck acp`: the agent on `target.workdir` in place, recorded as env `acp:NAME`."""
    from loopdeck.acp_env.opening import AgentsOwnModel, open_acp_workdir

    workdir = checked_workdir(target.workdir)
    model_name = agent_name(target.command)
    queue = None
    if approver is None:
        chosen = deciders(options.approve, model=model_name, console=console, recording=recording)
        approver, answerer, queue = chosen.approver, answerer or chosen.answerer, chosen.queue
    overrides = {BUDGET_FLAGS[k]: v for k, v in options.budget_overrides.items() if v is not None}
    config = RunConfig(
        **({"run_id": options.run_id} if options.run_id else {}),
        env=f"acp:{workdir.name or workdir}",
        model=model_name,
        goal=target.goal,
        mode="react",
        budget=Budget.model_validate(overrides),
        pause_at=options.pause_at,
    )
    try:
        agent = AgentConfig(acp=target.command, mode=target.mode, env=target.env)
    except ValidationError as exc:
        raise ScenarioError(f"the agent's command or --env: {exc}") from exc
    env, loop = open_acp_workdir(workdir, agent, target.check)
    runtime = Runtime(config, env, AgentsOwnModel(model_name), approver, bus=bus,
                      answerer=answerer, agent_loop=loop)  # fmt: skip
    return PreparedRun(None, runtime, workdir, queue, owns_workdir=False)


def checked_workdir(path: Path) -> Path:
    """`--workdir DIR`, which must be an existing folder: as an absolute path."""
    if not path.exists():
        raise ScenarioError(f"--workdir {path}: no such folder")
    if not path.is_dir():
        raise ScenarioError(f"--workdir {path}: not a folder")
    return path.resolve()


LAUNCHERS = frozenset({"{python}", "python", "python3", "npx", "node", "uvx", "-y", "-m", "--yes"})


def agent_name(command: list[str]) -> str:
    """An ACP agent as the run's model is named: `acp gemini-cli`, `acp scripted_agent`."""
    named = next((part for part in command if Path(part).name not in LAUNCHERS), command[0])
    last = named.rsplit("/", 1)[-1]
    last = re.sub(r"(?<=.)@[^@/]*$", "", last)  # an npm package's @version
    last = re.sub(r"\.(py|js|mjs|cjs|ts|sh|exe)$", "", last)
    return "acp " + last.rsplit(".", 1)[-1]  # a module's last name (`-m pkg.agent`)


def plays_a_script(agent: AgentConfig) -> bool:
    """Only loopdeck's scripted agent plays a script: its command takes one as `{script}`."""
    return any("{script}" in part for part in agent.acp)


def _config(
    options: RunOptions, scenario: Scenario, script_name: str | None, model_name: str
) -> RunConfig:
    """The run's settings: the scenario's, with the options' overrides."""
    overrides = {BUDGET_FLAGS[k]: v for k, v in options.budget_overrides.items() if v is not None}
    budget = Budget.model_validate({**scenario.budgets.model_dump(), **overrides})
    identity = {"run_id": options.run_id} if options.run_id else {}
    return RunConfig(
        **identity,
        env=scenario.name,
        script=script_name,
        model=model_name,
        goal=scenario.goal,
        mode=options.mode or scenario.mode,
        budget=budget,
        approval_ttl_s=scenario.approval_ttl_s,
        pause_at=options.pause_at if options.pause_at is not None else scenario.pause_at,
        loop_answer_s=scenario.loop_answer_s,
        store_hold_s=scenario.store_hold_s,
        model_timeout_s=options.model_timeout_s or scenario.model_timeout_s,
        examples=scenario.examples,
    )


def _env(env_dir: EnvDir, workdir: Path) -> Environment:
    """The run's env: its `env.py`'s, or, for an `[mcp]` env, one on its server (started
    here: a server that cannot start is a `ScenarioError` with its stderr's tail)."""
    if env_dir.scenario.mcp is None:
        return env_dir.create(workdir)
    from loopdeck.mcp_env.opening import open_mcp_env

    return open_mcp_env(env_dir, workdir)


def _script_name(options: RunOptions, env_dir: EnvDir, model_name: str) -> str | None:
    """The scripted model plays `--script`, else the env's `solve`."""
    if model_name != SCRIPTED or options.script is not None:
        return options.script
    if "solve" not in env_dir.scenario.scripts:
        known = ", ".join(sorted(env_dir.scenario.scripts)) or "(none)"
        raise ScenarioError(f"{env_dir.path}: choose a script with --script; scripts: {known}")
    return "solve"


def _model(
    options: RunOptions, env_dir: EnvDir, config: RunConfig, script: Script | None
) -> LiteLLMModel:
    """The run's model, its credentials checked first; a bad profile names scenario.toml."""
    scenario = env_dir.scenario
    check_credentials(config.model, options.api_base)
    try:
        return LiteLLMModel(
            config.model,
            api_base=options.api_base,
            script=script,
            price=scenario.scripted_price,
            react=config.mode == "react",
            profile_overrides=scenario.model_profile,
            temperature=scenario.temperature,
        )
    except (UnsupportedLayer, ValidationError) as exc:
        raise ScenarioError(f"{env_dir.path / 'scenario.toml'}: {exc}") from exc


def list_envs() -> list[dict[str, Any]]:
    return [describe_env(path) for path in find_env_dirs(sample_envs_root())]


def describe_env(path: Path) -> dict[str, Any]:
    """An env folder as the launcher lists it: its name, path, goal and scripts, or the
    error that keeps it from loading."""
    try:
        env_dir = load_env_dir(path)
    except ScenarioError as exc:
        return {"env": path.name, "path": str(path), "error": str(exc), "scripts": {}}
    scripts = {name: s.description for name, s in sorted(env_dir.scenario.scripts.items())}
    return {
        "env": env_dir.name,
        "path": str(path),
        "goal": env_dir.scenario.goal,
        "scripts": scripts,
    }
