"""Runs placed on workers: `loopdeck submit` records a run as queued with its options, as
JSON any worker reads back (`run_options`), after checking here what can be checked before a
worker takes it: the run prepared as `loopdeck run` prepares it (its env folder and kind, its
script against the env's tools, its policy, its model routable by LiteLLM), then let go,
and who decides its writes. A run whose opening would start its env's server (`[mcp]`) is
only read here, not opened: its worker starts the server and refuses what that shows. Its
policy is kept as the text checked here (each level's, as `PolicyInForce` records it): a
worker decides the run under that text, never under what its files say when it is claimed.
Its model's credentials are not checked here: they are the workers' hosts', not the
submitter's.

An env folder is kept by its absolute path (a worker on another host must see the same path:
storage both hosts see), a bundled sample env by its name.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from loopdeck.core.approvals import DenyApprover
from loopdeck.core.run_kind import opens_outside
from loopdeck.core.runtime import Runtime
from loopdeck.core.scenario import ScenarioError
from loopdeck.operator import waking
from loopdeck.operator.approving import default_approve_mode
from loopdeck.operator.launch import (
    RunOptions,
    check_model,
    plan_run,
    prepare_run,
    resolve_env_dir,
)
from loopdeck.store import leases
from loopdeck.store.base import Location
from loopdeck.store.opening import open_store

# What of `RunOptions` a submitted run keeps (the rest is this process's: a console's phase,
# `loopdeck acp`'s target, pushes).
KEPT = (
    "env", "script", "model", "api_base", "mode", "approve", "budget_overrides", "run_id",
    "model_timeout_s", "pause_at", "settings", "policy", "policy_levels",
)  # fmt: skip


def submitted(options: RunOptions) -> dict[str, Any]:
    """The options as the queue keeps them (JSON)."""
    kept = {name: value for name, value in asdict(options).items() if name in KEPT}
    kept["policy"] = None if options.policy is None else str(Path(options.policy).resolve())
    path = Path(options.env).expanduser()
    if path.is_dir():  # as `resolve_env_dir` finds it: a folder here before a sample's name
        kept["env"] = str(path.resolve())
    return kept


def run_options(kept: dict[str, Any], run_id: str) -> RunOptions:
    """A submitted run's options, as a worker prepares it."""
    chosen = {name: kept[name] for name in KEPT if name in kept}
    chosen["run_id"] = run_id
    if chosen.get("policy"):
        chosen["policy"] = Path(chosen["policy"])
    return RunOptions(**chosen)


def unrecorded_policy(kept: dict[str, Any]) -> str | None:
    """Why a run queued with the options `kept` cannot be decided under the policy it was
    submitted with: it was queued before the text checked at submit was kept with a run
    (`policy_levels`), so it keeps only its policy's path. Today's files are not read in its
    stead: they may not be what was checked then. Asked only of a run whose log cannot say
    its policy (`fork.recorded_policy`). None: its text is kept."""
    if "policy_levels" in kept:
        return None
    policy = kept.get("policy")
    named = f"only its policy's path ({policy})" if policy else "no policy's text"
    return (
        f"it was queued before policies were recorded with a run: it keeps {named}, and the"
        " policy files as they are now are not read in its stead (they may not be what was"
        " checked when it was submitted); submit it again"
    )


def checked(
    options: RunOptions,
    fits: Callable[[Runtime], None] | None = None,
    warn: Callable[[str], None] | None = None,
) -> RunOptions:
    """What a worker would refuse, refused now (`ScenarioError`, exit 2): the run read as
    `loopdeck run` reads it (its env folder and kind, script, policy, model: `plan_run`),
    then prepared as `run` prepares it (its script against the env's tools, `fits` asked of
    its runtime) and let go, unless opening it would start or reach something outside this
    process (`opens_outside`: an `[mcp]` env's server). That is its worker's to start, and
    to refuse by name what only opening it shows (a script calling a tool the server lacks,
    a fork its env cannot rebuild). A run waits in the queue with `--approve wait` unless
    told otherwise: nobody is at its worker's console. The env's default model and script are
    kept as resolved here; what preparing it warns of (a user policy's rule naming a tool the
    run has not) told to `warn`. Blocking (env code): off the loop."""
    recorded = options.policy_levels is not None  # a fork's: its source's text, no file read
    if options.policy is not None and not recorded and not Path(options.policy).is_file():
        raise ScenarioError(f"--policy {options.policy}: no such file")
    env_dir = resolve_env_dir(options.env, options.settings)
    if options.script is not None:
        env_dir.script(options.script)
    model = options.model or env_dir.scenario.model
    options.approve = options.approve or default_approve_mode(model)
    trial = replace(options, phase=None, notify=None)
    planned = plan_run(trial)
    # The defaults a worker would take from the env, kept as resolved now: a worker uses
    # these, whatever the env says when it claims the run, and `runs` shows them meanwhile.
    if planned.agent is None:  # a kind that brings its agent: the agent names the model
        options.model = options.model or planned.model_name
    options.script = options.script if options.script is not None else planned.script_name
    gate = planned.policy
    options.policy_levels = [] if gate is None else list(gate.in_force()["levels"])
    if opens_outside(planned.kind):
        check_model(planned)
        return options
    # Its writes are the worker's to decide (nothing here runs one), its model's keys the
    # worker's host's: a host that submits need not hold them.
    prepared = prepare_run(trial, approver=DenyApprover(), keys_here=False, planned=planned)
    try:
        if fits is not None:
            fits(prepared.runtime)
    finally:
        prepared.cleanup()
    if warn is not None:
        for warning in prepared.warnings:
            warn(warning)
    return options


async def submit(
    location: Location, options: RunOptions, warn: Callable[[str], None] | None = None
) -> str:
    """The run recorded as queued in the store (made if missing); its id. What checking it
    warns of is told to `warn`, and then what the store's workers mean for it, when that is
    not that one takes it up (none runs, or every slot is taken: `waking.workers_words`)."""
    options = await asyncio.to_thread(checked, options, None, warn)
    run_id = options.run_id or uuid.uuid4().hex[:12]
    options.run_id = run_id
    store = await open_store(location)
    try:
        await leases.submit(store, run_id, submitted(options))
        if warn is not None and (said := await waking.workers_words(store)):
            warn(f"run {run_id} is queued{said}")
    finally:
        await store.close()
    return run_id
