"""`loopdeck fork RUN_ID --at CALL_ID`: a new run from a run's events up to one of its calls,
queued for a worker, which rebuilds it from them and goes on from the model turn that
proposed the call: that turn and everything after it are the fork's own, with the model,
script or message the fork changes.

The run is rebuilt as a worker goes on with a run it takes over (`core/replay_log.py`): the
recorded model replies before the fork are served again (no call, no cost) and the fork's log
begins with the events the rebuilt run makes, its own from its first. Its env is put in the
state the run saw at the fork, where it can be (`env.restore(snapshot)`, on the fork's own
state: `reopen(fork_id)`); an env with no `restore` is forked only where it starts in that
state (`rebuildable`). Where the restored state is not that one, every standing grant given
before the fork is revoked as the fork goes live: nothing approved before it then runs
without being asked again (a receipt is bound to its state anyway).

The fork is decided under its source's policy, as the source recorded it (`PolicyInForce`'s
text; a submitted source's options', where its log recorded none), never under what the
policy files say now: the rebuilt run must decide as the run did, and a write the run's
policy denied is denied in the fork too. A rule of it that a check added since would refuse
is evaluated as the run evaluated it up to the fork point (the rebuild decides as the run
did); past it, it fails at every ask, closed (it never allows; a deny or an ask asks), and
the fork says so (`stale_policy`). A fork takes no other policy (to see what another would
have decided: `loopdeck policy replay`).

What a worker would refuse is refused before the fork is queued: its options checked as a
submitted run's (`placement.checked`: the env prepared, the path kept absolute), and its env
able to rebuild the run up to the fork (`rebuildable`); an env whose opening starts its
server (`[mcp]`) is not opened where it is forked: its worker checks it (`unforkable`). A
run whose log is broken up to the fork point (`loopdeck verify`) is never forked: the fork
would be a fresh chain over edited events. The hash of the source's event at the fork point
is recorded (`RunForked`'s `source_hash`) and checked again by the worker that rebuilds the
fork, and by `verify`. A queued run (no events yet) is refused saying so.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from functools import partial
from typing import Any

from loopdeck.core.canonical import short_hash
from loopdeck.core.events import ApprovalRequested, CallProposed, Event, PolicyInForce, StateSeen
from loopdeck.core.replay_events import ModelReplied, RunForked
from loopdeck.core.replay_log import ReplayLog
from loopdeck.core.runtime import Runtime
from loopdeck.core.scenario import ScenarioError
from loopdeck.operator import waking
from loopdeck.operator.launch import BUDGET_FLAGS
from loopdeck.operator.placement import checked, run_options, submitted
from loopdeck.operator.records import known_run
from loopdeck.operator.resume import load_log, unresumable
from loopdeck.store import leases, queries
from loopdeck.store.base import Location, Store, StoreError
from loopdeck.store.opening import open_store
from loopdeck.store.verification import chain_since, source_head

FORKED_BY = "fork"  # who revokes the grants the fork's state does not hold


def fork_point(log: list[Event], run_id: str, at_call: str) -> int:
    """The last event before the model turn that proposed `at_call`: what the fork is
    rebuilt through."""
    proposed = next((e for e in log if isinstance(e, CallProposed) and e.call_id == at_call), None)
    if proposed is None:
        calls = [e.call_id for e in log if isinstance(e, CallProposed)]
        named = f"its calls: {', '.join(calls)}" if calls else "it proposed no call"
        raise ScenarioError(f"run {run_id} has no call {at_call} ({named})")
    turn = next(
        (e for e in reversed(log) if isinstance(e, ModelReplied) and e.seq < proposed.seq), None
    )
    if turn is None:
        raise ScenarioError(
            f"run {run_id} cannot be forked at {at_call}: no model reply of its is in the log"
            " (it was recorded before loopdeck kept them, or its agent drives its own loop)"
        )
    return turn.asked_after


async def fork(
    location: Location | None,
    run_id: str,
    at_call: str,
    *,
    model: str | None = None,
    script: str | None = None,
    message: str | None = None,
    env: str | None = None,
    settings: list[str] | None = None,
    tell: Callable[[str], None] | None = None,
) -> str:
    """The fork queued for a worker; its run id. Refused (`ScenarioError`) with nothing
    queued when a worker could not prepare it or rebuild the run up to the fork. `tell`
    hears what the fork is decided under that its files would not say today, and what the
    store's workers mean for it when no free one takes it up (`waking.workers_words`)."""
    if message is not None and not message.strip():
        raise ScenarioError("--message: empty (leave it out to say nothing at the fork)")
    store = await open_store(location, create=False)
    try:
        row = await _known(store, run_id)
        run_id = str(row["run_id"])
        log = await load_log(store, run_id)
        through = fork_point(log, run_id, at_call)
        head = await _verified_head(store, run_id, at_call, through)
        options = await _options_of(store, run_id, row, log, env)
        if tell is not None:
            for said in stale_policy(run_id, options.get("policy_levels")):
                tell(said)
        changed = []
        for name, value in (("model", model), ("script", script)):
            if value is not None:
                options[name] = value
                changed.append(f"{name} {value}")
        if message:
            changed.append("a message to the agent")
        if settings:
            options["settings"] = [*options.get("settings", []), *settings]
            changed += [f"--set {text}" for text in settings]
        fork_id = uuid.uuid4().hex[:12]
        used = {e.tool for e in log if isinstance(e, CallProposed) and e.seq <= through}
        seen = next(
            (e for e in reversed(log) if isinstance(e, StateSeen) and e.seq <= through), None
        )
        run = run_options(options, fork_id)
        fits = partial(rebuildable, used=used, run_id=run_id, at_call=at_call, seen=seen)
        options = submitted(await asyncio.to_thread(checked, run, fits))
        options["fork"] = {"source": run_id, "at": at_call, "through": through,
                           "message": message, "changed": changed,
                           "source_hash": head}  # fmt: skip
        await leases.submit(store, fork_id, options)
        if tell is not None and (said := await waking.workers_words(store)):
            tell(f"run {fork_id} is queued{said}")
    finally:
        await store.close()
    return fork_id


async def _known(store: Store, run_id: str) -> dict[str, Any]:
    """The run's row; a queued run (no row, no events yet) refused saying so."""
    try:
        return await known_run(store, run_id)
    except StoreError:
        waiting = [str(row["run_id"]) for row in await queries.placements(store)
                   if row["state"] == leases.QUEUED]  # fmt: skip
        named = [queued for queued in waiting if queued.startswith(run_id)]
        if run_id in waiting or len(named) == 1:
            raise ScenarioError(
                f"run {run_id if run_id in waiting else named[0]} is queued: no worker has"
                " started it, so it has no events yet: nothing to fork (see `loopdeck runs`)"
            ) from None
        raise


async def _verified_head(store: Store, run_id: str, at_call: str, through: int) -> str | None:
    """The hash of the run's event at the fork point, its log verified up to there; a
    broken log refused, naming the break (None: its events there are from before the
    chain, which nothing vouches for nor denies)."""
    head, why = await source_head(store, run_id, through, await chain_since(store))
    if why is not None and "before the chain" not in why:
        raise ScenarioError(
            f"run {run_id} cannot be forked at {at_call}: {why} (`loopdeck verify {run_id}`);"
            " a fork of it would carry those events on under a chain of its own"
        )
    return head


def rebuildable(
    runtime: Runtime, used: set[str], run_id: str, at_call: str, seen: StateSeen | None = None
) -> None:
    """The fork's prepared runtime can rebuild the run up to the fork: its loop is loopdeck's
    own, its env has every tool the run's calls before the fork used (else the replies
    served from the log name tools it does not have, and the rebuilt run diverges), and it
    can be in the state the run saw at the fork (`seen`): it is in it as it starts, or it can
    be put back (`restore(snapshot)`). A fork from another state would go on from a state
    its log says nothing of (the writes before the fork recorded as done, not done in it)."""
    why = unresumable(runtime, reopened=False)
    if why is not None:
        raise ScenarioError(f"run {run_id} cannot be forked: {why}")
    missing = sorted(used - {spec.name for spec in runtime.env.tools()})
    if missing:
        raise ScenarioError(
            f"run {run_id} cannot be rebuilt up to {at_call} with env {runtime.config.env}:"
            f" the run's calls used {', '.join(missing)}, which it has no tool for (name the"
            " run's env with --env)"
        )
    why = None if seen is None else elsewhere(runtime, seen)
    if why is not None:
        raise ScenarioError(f"run {run_id} cannot be forked at {at_call}: {why}")


def unforkable(runtime: Runtime, replay: ReplayLog, forked: dict[str, Any]) -> str | None:
    """Why the fork's runtime, as its worker prepared it, cannot rebuild its source up to the
    fork (`rebuildable`, asked again here: an env whose opening starts a server was not
    opened where it was forked); None when it can. Its state is checked as it is restored."""
    used = {e.tool for e in replay.events if isinstance(e, CallProposed)}
    try:
        rebuildable(runtime, used, str(forked["source"]), str(forked["at"]))
    except ScenarioError as exc:
        return str(exc)
    return None


def elsewhere(runtime: Runtime, seen: StateSeen) -> str | None:
    """Why the fork's env, with no `restore(snapshot)`, cannot be known to start in the state
    its source saw at the fork (`seen`): it starts in another, or its state cannot be read.
    None: it can be restored, or it starts there."""
    if callable(getattr(runtime.env, "restore", None)):
        return None
    env = type(runtime.env).__name__
    try:
        now = runtime.env.fingerprint()
    except Exception as exc:
        return (
            f"its env ({env}) has no restore(snapshot), and its state could not be read to"
            f" check it starts where the run was ({type(exc).__name__}: {exc})"
        )
    if now == seen.fingerprint:
        return None
    return (
        f"its env ({env}) starts in state {now}, not in the state the run saw there"
        f" ({seen.fingerprint}), and has no restore(snapshot) to be put back in it; fork at a"
        " call made before the run's first write changed it, or give the env restore(snapshot)"
    )


async def _options_of(
    store: Store, run_id: str, row: dict[str, Any], log: list[Event], env: str | None
) -> dict[str, Any]:
    """The run's options as submitted; a run that was not submitted, as its log and row say
    (its env by `--env`, else by the name a sample env has)."""
    options = await _placed_or_recorded(store, run_id, row, log, env)
    recorded = recorded_policy(log)
    if recorded is not None:
        options["policy_levels"] = recorded
    return options


def recorded_policy(log: list[Event]) -> list[dict[str, str]] | None:
    """The policy the run recorded it was decided under (each level's text), if it did; []
    where its log says it had none: a policy records itself (`PolicyInForce`) before the
    first ask it rules, so a run that asked with none recorded was decided under none. None:
    its log cannot say (no ask yet)."""
    in_force = next((e for e in log if isinstance(e, PolicyInForce)), None)
    if in_force is not None:
        return [dict(level) for level in in_force.levels]
    return [] if any(isinstance(e, ApprovalRequested) for e in log) else None


def stale_policy(run_id: str, levels: list[dict[str, str]] | None) -> list[str]:
    """What the run's recorded policy would be refused for if read from its files today (a
    check added since it was recorded), in words: the fork is decided under it all the same,
    such a rule failing closed past the fork point (`policy/gate.RunPolicy.rebuilding`)."""
    if not levels:
        return []
    from loopdeck.policy.loading import refused_today  # the expression engine: only for one

    return [
        f"run {run_id}'s recorded policy would be refused if read today ({why}); the fork is"
        " decided under it: up to the fork point as the run was, past it that rule is not"
        " evaluated: it fails at every ask, closed (it never allows; a deny or an ask asks)"
        for why in refused_today(levels)
    ]


async def _placed_or_recorded(
    store: Store, run_id: str, row: dict[str, Any], log: list[Event], env: str | None
) -> dict[str, Any]:
    placed = await leases.placement(store, run_id)
    if placed is not None:
        import json

        options: dict[str, Any] = json.loads(placed["options"])
        options.pop("fork", None)
        if env is not None:
            options["env"] = env
        return options
    started = log[0] if log else None
    budget = getattr(started, "budget", {}) or {}
    flags = {field: flag for flag, field in BUDGET_FLAGS.items()}
    return {
        "env": env or str(row["env"]),
        "script": row["script"],
        "model": row["model"],
        "mode": row["mode"],
        "approve": row["approve_mode"] if row["approve_mode"] in ("auto", "deny") else "wait",
        "budget_overrides": {flags[k]: v for k, v in budget.items() if k in flags},
        "settings": [],
    }


class SourceLog(ReplayLog):
    """A fork's source's events, through the fork point: its replies served cost the fork
    nothing; `broken`: why the source no longer holds the events the fork was made from."""

    def __init__(self, events: list[Event], broken: str | None) -> None:
        super().__init__(events)
        self.free = True
        self.broken = broken


async def source_of(store: Store, forked: dict[str, Any]) -> ReplayLog:
    """The events a fork is rebuilt from: its source's, through the fork point, checked
    again against the hash recorded when it was forked (refused in `restored`)."""
    source, through = str(forked["source"]), int(forked["through"])
    log = await load_log(store, source)
    head, why = await source_head(store, source, through, await chain_since(store))
    recorded = forked.get("source_hash")
    if why is None and recorded is not None and head != recorded:
        why = f"run {source}'s event {through} is hashed {head}, not {recorded} as when forked"
    broken = None if why is None or "before the chain" in why else why
    return SourceLog([e for e in log if e.seq <= through], broken)


async def restored(runtime: Runtime, replay: ReplayLog) -> bool:
    """The fork's env put in the state its source saw at the fork, where it can be; whether
    it is in that state now. An env with no `restore` must start in it (`elsewhere`: else
    `ScenarioError`, checked here as at submit: this host's env may start elsewhere)."""
    if isinstance(replay, SourceLog) and replay.broken is not None:
        raise ScenarioError(
            f"its source no longer holds the events it was forked from: {replay.broken}"
        )
    seen = replay.last_of(StateSeen)
    env = runtime.env
    restore = getattr(env, "restore", None)
    if seen is not None and (why := await asyncio.to_thread(elsewhere, runtime, seen)):
        raise ScenarioError(why)
    if seen is None or seen.snapshot is None or not callable(restore):
        return False
    await asyncio.to_thread(restore, seen.snapshot)
    now = await asyncio.to_thread(env.snapshot)
    return bool(short_hash(now) == seen.fingerprint)


def went_live(runtime: Runtime, replay: ReplayLog, forked: dict[str, Any], same: bool) -> None:
    """The fork is rebuilt: say so, revoke what was granted for a state it is not in, and
    tell the agent the fork's message before its next turn. Its source's writes whose outcome
    is unknown are settled where its state is the one the source saw after them (restored
    from the source's snapshot): their outcome is that state's. Elsewhere they are still the
    operator's to resolve: nobody knows whether they took effect in what the fork has."""
    run_id = runtime.config.run_id
    unknown = runtime.calls.unknown
    settled = unknown.waiting() if same else []
    unknown.settle(settled)
    gate = runtime.calls.approvals.policy.gate  # its rules' start: its source's, kept
    since = gate.in_force().get("rules_since") if gate is not None else None
    runtime.emit(RunForked, run_id=run_id, source=str(forked["source"]), at_call=str(forked["at"]),
                 through_seq=int(forked["through"]), changed=list(forked.get("changed") or []),
                 state_restored=same, source_hash=forked.get("source_hash"),
                 settled=settled, rules_since=since)  # fmt: skip
    if not same:
        for grant in list(runtime.calls.approvals.grants.given):
            runtime.revoke(
                grant.grant_id, by=f"{FORKED_BY} (its state is not the one it was given in)"
            )
    if forked.get("message"):
        runtime.message(str(forked["message"]), by=FORKED_BY)
