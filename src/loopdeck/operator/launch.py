"""From the operator's options to a ready Runtime, one path for every kind of run: an env
folder (its kind named by its `scenario.toml` table, `operator/kinds.py`) on a fresh copy of
its workspace, or a target with no env folder (`loopdeck acp`) on the user's folder in place."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import ValidationError

from loopdeck import settings
from loopdeck.bundled import bundled_folder
from loopdeck.core.approvals import Answerer, Approver
from loopdeck.core.budgets import FLAGGED_CAPS, Budget
from loopdeck.core.envdir import EnvDir, load_env_dir, workdir_in_script
from loopdeck.core.events import EventBus
from loopdeck.core.policy_gate import PolicyGate
from loopdeck.core.run_kind import Opening, RunKind, Target
from loopdeck.core.runtime import RunConfig, Runtime
from loopdeck.core.scenario import Scenario, ScenarioError, Script
from loopdeck.core.script_check import check_script
from loopdeck.core.tools import ToolSpec
from loopdeck.llm.client import SCRIPTED, LiteLLMModel, check_credentials, unroutable
from loopdeck.llm.profile import UnsupportedLayer
from loopdeck.operator.approval_queue import ApprovalQueue
from loopdeck.operator.approving import ApproveMode, deciders
from loopdeck.operator.kinds import kind_named, kind_of
from loopdeck.operator.notify_config import NotifySettings
from loopdeck.policy.sources import policy_files
from loopdeck.store.approver import Recording

# Each budget flag's name in `RunOptions.budget_overrides` ("max_cost"), and the Budget
# field it sets ("max_cost_usd"): the caps' own facts (`Cap.flag`, `Cap.limit_field`).
BUDGET_FLAGS = {cap.option: cap.limit_field for cap in FLAGGED_CAPS}


def sample_envs_root() -> Path:
    """The sample envs inside the package (LOOPDECK_SAMPLE_ENVS names another folder)."""
    return settings.current().sample_envs or bundled_folder("sample_envs")


def resolve_env_dir(spec: str, settings: list[str] | None = None) -> EnvDir:
    """An env by path (`./my_env`), or a bundled sample env by name (`service_outage`),
    checked by its kind."""
    path = Path(spec).expanduser()
    root = sample_envs_root()
    if not path.is_dir() and (root / spec).is_dir():
        path = root / spec
    env_dir = load_env_dir(path, known_root=root, settings=settings)
    kind_of(env_dir.scenario, path / "scenario.toml", env_dir.settings).check(env_dir)
    return env_dir


@dataclass(frozen=True)
class AcpTarget:
    """`loopdeck acp`: an ACP agent on the user's folder, worked on in place, no env folder."""

    goal: str
    workdir: Path
    command: list[str]  # the agent's, run without a shell
    check: list[str] | None = None  # the goal check (exit 0: met); None: the operator judges
    mode: str | None = None  # the ACP session mode to set
    env: dict[str, str] = field(default_factory=dict)  # added to the agent's; `${VAR}` allowed
    kind: str = "acp"

    @property
    def env_name(self) -> str:
        return f"acp:{self.workdir.name or self.workdir}"


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
    acp: Target | None = None  # `loopdeck acp`, `gateway`: no env folder (`env` only its name)
    policy: Path | None = None  # `--policy FILE`: the run's level of its policy
    # The run's policy as recorded (each level's `PolicyInForce.levels` entry, its text):
    # the run is decided under it, no file read again ([]: no policy); None: its files.
    policy_levels: list[dict[str, str]] | None = None
    notify: NotifySettings | None = None  # `--notify`: where its decisions are pushed


@dataclass
class PreparedRun:
    env_dir: EnvDir | None  # None: a target with no env folder (`loopdeck acp`)
    runtime: Runtime
    workdir: Path
    queue: ApprovalQueue | None = None  # the console's, when it decides (`approving.deciders`)
    # A temporary copy is the run's to remove; the user's folder (`loopdeck acp`) never is.
    owns_workdir: bool = True
    # What its start has to say that does not refuse it (the user's policy naming a tool
    # this run does not have: `policy/tool_names.py`).
    warnings: tuple[str, ...] = ()
    notifier: Any = None  # `--notify`'s `Notifier`, when its decisions are pushed

    def cleanup(self) -> None:
        self.runtime.env.close()
        if self.owns_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)


@dataclass(frozen=True)
class PlannedRun:
    """A run as its options make it before anything of it is opened: its env folder (checked
    by its kind) or target, its kind, its agent's name when the kind brings one, its model's
    name, its script (named, read, not yet played), its policy and its settings."""

    options: RunOptions
    env_dir: EnvDir | None
    kind: RunKind
    agent: str | None
    model_name: str
    script_name: str | None
    script: Script | None
    policy: PolicyGate | None
    config: RunConfig


def plan_run(options: RunOptions, *, console: bool = False) -> PlannedRun:
    """What the options name, read and checked without opening anything (`ScenarioError`,
    `PolicyError` naming what is wrong): the env folder and its kind, the script, the policy,
    the settings. `prepare_run` opens it; a run placed on workers is checked from it."""
    target = options.acp
    env_dir = None if target is not None else resolve_env_dir(options.env, options.settings)
    kind = kind_named(target.kind) if target is not None else kind_of(_scenario(env_dir))
    agent = kind.agent_name(env_dir, target)
    model_name = agent or options.model or _scenario(env_dir).model
    script_name, script = _script(options, kind, env_dir, agent, model_name)
    policy = _policy(options, env_dir, kind)
    guarded = console or options.approve in ("deny", "wait")
    config = _config(options, env_dir, target, script_name, model_name, guarded)
    return PlannedRun(options, env_dir, kind, agent, model_name, script_name, script, policy,
                      config)  # fmt: skip


def check_model(planned: PlannedRun) -> None:
    """The run's model (when it is loopdeck's to call) routed somewhere by LiteLLM and its
    profile read, its credentials left to the host that runs it: nothing is opened."""
    if planned.agent is None:
        env_dir = _scenario_dir(planned.env_dir)
        _model(planned.options, env_dir, planned.config, planned.script, keys_here=False)


def prepare_run(
    options: RunOptions,
    approver: Approver | None = None,
    bus: EventBus | None = None,
    answerer: Answerer | None = None,
    *,
    console: bool = False,
    recording: Recording | None = None,
    keys_here: bool = True,
    planned: PlannedRun | None = None,
) -> PreparedRun:
    """The run `options` name, of whatever kind: on a fresh copy of its env's workspace, or
    on a target's folder in place. Its approver (unless given) is chosen by
    `operator.approving.deciders`: the console's queue when `console`, raced with the store
    when `recording`. `keys_here` False: the model's credentials are not this host's to
    check (a run placed on workers is checked where it is submitted, run where they are).
    `planned`: the options already read (`plan_run`)."""
    planned = planned or plan_run(options, console=console)
    env_dir, target, kind, agent = planned.env_dir, options.acp, planned.kind, planned.agent
    script_name, script, config = planned.script_name, planned.script, planned.config
    queue = None
    if approver is None:
        chosen = deciders(options.approve, model=planned.model_name, console=console,
                          recording=recording)  # fmt: skip
        approver, answerer, queue = chosen.approver, answerer or chosen.answerer, chosen.queue
    if target is not None:
        workdir, owns = checked_workdir(target.workdir), False
    else:
        workdir, owns = _scenario_dir(env_dir).prepare_workdir(), True
    opened = None
    try:
        if script is not None:
            script = workdir_in_script(script, workdir)
        model = None
        if not agent:
            model = _model(options, _scenario_dir(env_dir), config, script, keys_here)
        opening = Opening(workdir, env_dir, target, script_name, script, options.phase)
        opened = kind.open(opening)
        warnings = _checked_against_tools(planned, opened.env.tools(), script)
    except Exception:
        if opened is not None:
            opened.env.close()
        if owns:
            shutil.rmtree(workdir, ignore_errors=True)
        raise
    run_model = opened.model or model
    assert run_model is not None, "a kind with no model of its own runs the run's model"
    runtime = Runtime(config, opened.env, run_model, approver, bus=bus, answerer=answerer,
                      agent_loop=opened.loop, policy=planned.policy)  # fmt: skip
    seen = getattr(planned.policy, "seen", None)  # its rules' age counts from the run's start
    if callable(seen):
        runtime.bus.subscribe(seen)
    notifier = None
    if options.notify is not None and options.notify.on:
        from loopdeck.operator.notifications import watch_run

        notifier = watch_run(runtime.bus, options.notify, recording)
    return PreparedRun(env_dir, runtime, workdir, queue, owns_workdir=owns, warnings=warnings,
                       notifier=notifier)  # fmt: skip


def _checked_against_tools(
    planned: PlannedRun, specs: list[ToolSpec], script: Script | None
) -> tuple[str, ...]:
    """The script and the policy read from files against the tools the run has
    (`ScenarioError`, `PolicyError`); the warnings of a policy naming a tool it has not. A
    policy the run recorded is not checked again: the run is decided under it as it was."""
    tools = {spec.name: spec for spec in specs}
    env_dir, script_name = planned.env_dir, planned.script_name
    if script is not None and script_name is not None and env_dir is not None:
        check_script(env_dir.path / "scenario.toml", script_name, script, tools)
    if planned.policy is None or planned.options.policy_levels is not None:
        return ()
    from loopdeck.policy.gate import RunPolicy
    from loopdeck.policy.tool_names import unknown_tools

    assert isinstance(planned.policy, RunPolicy), "a policy read from files is a RunPolicy"
    return tuple(unknown_tools(planned.policy.policy, tools))


def _policy(options: RunOptions, env_dir: EnvDir | None, kind: RunKind) -> PolicyGate | None:
    """The run's policy (`loopdeck/policy/`): the text it recorded (a submitted, resumed or
    forked run: `policy_levels`), else the user's, the env folder's and `--policy`'s files,
    read whole before anything starts; the expression engine loads only for one."""
    if options.policy_levels is not None:
        if not options.policy_levels:
            return None
        from loopdeck.policy.loading import recorded_run_policy

        return recorded_run_policy(options.policy_levels, kind.name)
    files = policy_files(env_dir.path if env_dir else None, options.policy)
    if not files:
        return None
    from loopdeck.policy.loading import run_policy

    return run_policy(files, kind.name)


def _scenario_dir(env_dir: EnvDir | None) -> EnvDir:
    assert env_dir is not None, "only a run from an env folder reads its scenario"
    return env_dir


def _scenario(env_dir: EnvDir | None) -> Scenario:
    return _scenario_dir(env_dir).scenario


def _script(
    options: RunOptions, kind: RunKind, env_dir: EnvDir | None, agent: str | None, model: str
) -> tuple[str | None, Script | None]:
    """The script a run plays: its model's, when the model is the scripted one; its agent's,
    when its agent is loopdeck's scripted one (named now if it is not there)."""
    if env_dir is None:
        return None, None
    if agent is not None:
        if not kind.plays_scripts(env_dir):
            return options.script, None
        name = _script_name(options, env_dir, SCRIPTED)
        if name:
            env_dir.script(name)
        return name, None
    name = _script_name(options, env_dir, model)
    return name, env_dir.script(name) if model == SCRIPTED and name else None


def checked_workdir(path: Path) -> Path:
    """`--workdir DIR`, which must be an existing folder: as an absolute path."""
    if not path.exists():
        raise ScenarioError(f"--workdir {path}: no such folder")
    if not path.is_dir():
        raise ScenarioError(f"--workdir {path}: not a folder")
    return path.resolve()


def _config(
    options: RunOptions,
    env_dir: EnvDir | None,
    target: Any,
    script_name: str | None,
    model_name: str,
    guarded: bool,
) -> RunConfig:
    """The run's settings: the scenario's (a target has only its goal), with the options'
    overrides."""
    overrides = {BUDGET_FLAGS[k]: v for k, v in options.budget_overrides.items() if v is not None}
    identity = {"run_id": options.run_id} if options.run_id else {}
    if env_dir is None:
        return RunConfig(
            **identity, env=target.env_name, model=model_name, goal=target.goal, mode="react",
            budget=Budget.model_validate(overrides), pause_at=options.pause_at,
            stop_on_unrequested=guarded,
        )  # fmt: skip
    scenario = env_dir.scenario
    budget = Budget.model_validate({**scenario.budgets.model_dump(), **overrides})
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
        stop_on_unrequested=guarded,
    )


def _script_name(options: RunOptions, env_dir: EnvDir, model_name: str) -> str | None:
    """The scripted model plays `--script`, else the env's `solve`."""
    if model_name != SCRIPTED or options.script is not None:
        return options.script
    if "solve" not in env_dir.scenario.scripts:
        known = ", ".join(sorted(env_dir.scenario.scripts)) or "(none)"
        raise ScenarioError(f"{env_dir.path}: choose a script with --script; scripts: {known}")
    return "solve"


def _model(
    options: RunOptions,
    env_dir: EnvDir,
    config: RunConfig,
    script: Script | None,
    keys_here: bool = True,
) -> LiteLLMModel:
    """The run's model, one LiteLLM routes somewhere, its credentials checked first (when
    they are this host's); a bad profile names scenario.toml."""
    scenario = env_dir.scenario
    if (why := unroutable(config.model, options.api_base)) is not None:
        named = "--model" if options.model else f"{env_dir.path / 'scenario.toml'}: model"
        raise ScenarioError(f"{named} {config.model}: {why}")
    if keys_here:
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


@dataclass(frozen=True)
class TourStop:
    """One line of the chooser's "start here" list: a sample env's script that shows one
    thing the console does."""

    shows: str
    env: str  # the sample env's folder name
    script: str


TOUR = (
    TourStop("approve a write", "order_support", "solve"),
    TourStop("reject, with a reason", "service_outage", "restart-first"),
    TourStop("edit, then approve", "order_support", "typo"),
    TourStop("grant, then revoke", "service_outage", "grant"),
    TourStop("an unknown outcome", "order_support", "unknown-outcome"),
    TourStop("answer the agent", "order_support", "ask-then-act"),
    TourStop("the guard asks", "service_outage", "loop"),
    TourStop("a budget pause", "calc_acp", "runaway"),
    TourStop("stop and kill", "service_outage", "slow-rollout"),
    TourStop("an MCP server", "notes_mcp", "solve"),
    TourStop("an ACP agent", "calc_acp", "solve"),
)
