"""A rule's age (`rule.age_s`) counts from the run's start as its log records it: in a live
run (not from when its policy was loaded), in a run rebuilt from its log on another worker
(not from the rebuild), and in `policy replay`, alike; its uses and the state it last allowed
in come back from the log with it."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path

from worker_helpers import lease_state, left_by_a_lost_worker, options, stored, with_a_worker

from loopdeck.core.events import (
    ApprovalDecided,
    Event,
    EventBus,
    PolicyDecided,
    PolicyInForce,
    RunStarted,
    RunStopped,
)
from loopdeck.core.recorded_inputs import record_inputs
from loopdeck.core.replay_events import RunForked
from loopdeck.operator.fork import fork
from loopdeck.operator.launch import prepare_run
from loopdeck.policy.engine import Policy
from loopdeck.policy.gate import RunPolicy
from loopdeck.policy.record import read_run
from loopdeck.policy.replay import recorded_policy, replay
from loopdeck.store.base import Store
from loopdeck.store.opening import open_store

# The note allowed while the run is young, the address update too; past that, asked.
YOUNG = """[[rule]]
id = "young-notes"
effect = "allow"
when = 'call.tool == "add_note" && rule.age_s < 30.0'

[[rule]]
id = "young-address"
effect = "allow"
when = 'call.tool == "update_delivery_address" && rule.age_s < 30.0'
"""
EARLIER = timedelta(seconds=120)


async def _ended(store: Store, run_id: str) -> bool:
    return await lease_state(store, run_id) == "ended"


async def _run(root: Path, run_id: str, policy: Path, *, loaded_early: bool = False) -> list[Event]:
    """The run under `policy`, no worker lost; `loaded_early`: its policy loaded a while
    (the clock moved on) before the run starts, as a slow start does."""
    bus = EventBus()
    events: list[Event] = []
    bus.subscribe(events.append)
    prepared = prepare_run(options(root, run_id=run_id, policy=policy), bus=bus)
    prepared.runtime.env.reopen(run_id)  # type: ignore[attr-defined]
    record_inputs(prepared.runtime)
    loaded = datetime.now(UTC)
    while loaded_early and datetime.now(UTC) < loaded + timedelta(milliseconds=50):
        await asyncio.sleep(0.005)  # until the clock has moved on past the load
    try:
        await prepared.runtime.run()
    finally:
        prepared.cleanup()
    return events


def _decided(log: list[Event], call_id: str) -> PolicyDecided:
    return next(e for e in log if isinstance(e, PolicyDecided) and e.call_id == call_id)


def _age(decided: PolicyDecided, rule: str) -> float:
    return float(decided.facts["rules"][f"run:{rule}"]["age_s"])


def _earlier(event: Event) -> Event:
    """The event as if it had happened `EARLIER`: the run began two minutes ago."""
    update: dict[str, object] = {"at": event.at - EARLIER}
    if isinstance(event, PolicyDecided):
        then = datetime.fromisoformat(str(event.facts["time"])) - EARLIER
        update["facts"] = {**event.facts, "time": then.isoformat()}
    if isinstance(event, PolicyInForce) and event.rules_since is not None:
        update["rules_since"] = event.rules_since - EARLIER
    return event.model_copy(update=update)


async def test_a_live_rules_age_counts_from_the_runs_start_not_its_policys_load(
    tmp_path: Path,
) -> None:
    path = tmp_path / "policy.toml"
    path.write_text(YOUNG, encoding="utf-8")
    log = await _run(tmp_path / "shared", "r1", path, loaded_early=True)
    started = next(e for e in log if isinstance(e, RunStarted))
    note = _decided(log, "c3")
    since_start = (datetime.fromisoformat(str(note.facts["time"])) - started.at).total_seconds()
    assert _age(note, "young-notes") == round(since_start, 3)
    # `policy replay` under the run's own policy counts the same age: nothing differs.
    record = read_run("r1", log)
    policy = recorded_policy(record)
    assert policy is not None
    replayed = replay(record, policy)
    assert [r.evaluation.facts["rules"] for r in replayed if r.evaluation] == [
        e.facts["rules"] for e in log if isinstance(e, PolicyDecided)
    ]
    assert not any(r.differs for r in replayed)


async def test_a_rebuilt_run_counts_its_rules_age_from_its_recorded_start(tmp_path: Path) -> None:
    path = tmp_path / "policy.toml"
    path.write_text(YOUNG, encoding="utf-8")
    whole = await _run(tmp_path / "first", "r1", path)
    assert _decided(whole, "c3").effect == "allow" and _decided(whole, "c5").effect == "allow"
    # Its worker was lost after the note was allowed, two minutes ago (when the run began).
    noted = next(e for e in whole if isinstance(e, ApprovalDecided) and e.call_id == "c3")
    cut = [_earlier(e) for e in whole[: whole.index(noted) + 1]]
    db, root = tmp_path / "s.db", tmp_path / "shared"
    store = await open_store(db)
    try:
        await left_by_a_lost_worker(store, root, "r1", cut, options(root, run_id="r1", policy=path))
        await with_a_worker(db, lambda: _ended(store, "r1"))
        log = await stored(store, "r1")
    finally:
        await store.close()
    stop = log[-1]
    # Rebuilt at the note's recorded time and age, it allowed the note again, as it had.
    assert isinstance(stop, RunStopped) and stop.stop_reason.value != "crashed", stop
    address = _decided(log, "c5")
    assert address.effect == "none", address  # two minutes into the run: asked, not allowed
    assert _age(address, "young-address") >= EARLIER.total_seconds()
    note = _decided(cut, "c3")
    assert address.facts["rules"]["run:young-notes"]["uses"] == 1  # from the log
    assert address.facts["rules"]["run:young-notes"]["last_state"] == note.facts["state"]["hash"]


async def test_a_fork_counts_its_rules_age_from_its_sources_start(tmp_path: Path) -> None:
    """A fork goes on under its source's policy as the source left it: uses carried, and
    ages from the source's start, not the fork's. The source began two minutes ago; its
    young-address rule allowed then and no longer would: the fork's address update is asked,
    and `policy replay` of the fork counts the same ages."""
    path = tmp_path / "policy.toml"
    path.write_text(YOUNG, encoding="utf-8")
    whole = await _run(tmp_path / "first", "r1", path)
    assert _decided(whole, "c5").effect == "allow"
    db, root = tmp_path / "s.db", tmp_path / "shared"
    store = await open_store(db)
    try:
        run = options(root, run_id="r1", policy=path)
        await left_by_a_lost_worker(store, root, "r1", [_earlier(e) for e in whole], run)
        forked = await fork(db, "r1", "c5")
        await with_a_worker(db, lambda: _ended(store, forked))
        log = await stored(store, forked)
    finally:
        await store.close()
    stop = log[-1]
    assert isinstance(stop, RunStopped) and stop.stop_reason.value != "crashed", stop
    went = next(i for i, e in enumerate(log) if isinstance(e, RunForked))
    address = next(
        e
        for e in log[went:]
        if isinstance(e, PolicyDecided)
        and "run:young-address" in e.facts["rules"]
        and e.facts["call"]["tool"] == "update_delivery_address"
    )
    assert address.effect == "none", address  # two minutes into its source: asked
    assert _age(address, "young-address") >= EARLIER.total_seconds()
    assert address.facts["rules"]["run:young-notes"]["uses"] == 1  # carried from the source
    went_live, in_force = log[went], next(e for e in log if isinstance(e, PolicyInForce))
    assert isinstance(went_live, RunForked) and went_live.rules_since is not None
    assert went_live.rules_since == in_force.rules_since  # for a rebuild before its first ask
    record = read_run(forked, log)
    policy = recorded_policy(record)
    assert policy is not None
    assert not any(r.differs for r in replay(record, policy))


def test_a_fork_rebuilt_before_its_first_ask_counts_its_rules_age_from_its_sources_start() -> None:
    """A fork whose source had asked nothing has no `PolicyInForce` until its own first ask:
    rebuilt before it (parked after it went live, or moved while still following its
    source), its rules' ages count from its source's start all the same, not its own."""
    source_start = datetime(2026, 1, 1, tzinfo=UTC)
    fork_start = source_start + timedelta(hours=1)
    source = [RunStarted.model_construct(seq=1, run_id="src", at=source_start)]
    started = RunStarted.model_construct(seq=1, run_id="f", at=fork_start)
    went_live = RunForked(
        run_id="f", seq=2, source="src", at_call="c1", through_seq=1, rules_since=source_start
    )
    for log, own in (([started, went_live], [started, went_live]), (source, [started])):
        gate = RunPolicy(Policy([]), "python")
        gate.rebuilding(log, own)
        assert gate.book.since == source_start, (own, gate.book.since)
