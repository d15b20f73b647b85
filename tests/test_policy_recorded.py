"""A run is decided under the policy recorded with it, never under what its files say later:
a submitted run under the text checked at submit, a run going on from its log under its log's
`PolicyInForce`, a fork under its source's. A write decided while no worker held its run, and
never taken by it, is not left as an outcome nobody knows when the run crashes."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from worker_helpers import (
    lease_state,
    left_by_a_lost_worker,
    options,
    significant,
    stored,
    with_a_worker,
    writes,
)

from loopdeck.core.approvals import ApprovalDecision
from loopdeck.core.events import (
    ApprovalDecided,
    ApprovalRequested,
    Event,
    EventBus,
    PolicyDecided,
    PolicyInForce,
    RunStopped,
    ToolFinished,
)
from loopdeck.core.outcome import CallStatus
from loopdeck.core.recorded_inputs import record_inputs
from loopdeck.operator.fork import fork
from loopdeck.operator.launch import prepare_run
from loopdeck.operator.placement import submit
from loopdeck.store import deciding, outcome_queries, queries
from loopdeck.store.base import Store
from loopdeck.store.opening import open_store

NO_ADDRESS = """[[rule]]
id = "no-address"
effect = "deny"
when = 'call.tool == "update_delivery_address"'
message = "the address stays"
"""
ANYTHING = '[[rule]]\nid = "anything"\neffect = "allow"\nwhen = "true"\n'


async def ended(store: Store, run_id: str) -> bool:
    return await lease_state(store, run_id) == "ended"


def _in_force(log: list[Event]) -> list[str]:
    return [level["text"] for e in log if isinstance(e, PolicyInForce) for level in e.levels]


def _address_denied(log: list[Event]) -> None:
    """The run's policy denied the address update, which never ran."""
    said = [e for e in log if isinstance(e, PolicyDecided) and e.effect == "deny"]
    assert said and all(e.decided_by and e.decided_by.rule_id == "no-address" for e in said)
    ran = [e for e in log if isinstance(e, ToolFinished) and e.status is CallStatus.EXECUTED]
    assert "update_delivery_address" not in [e.tool for e in ran]


async def test_a_submitted_run_is_decided_under_the_policy_checked_at_submit(
    tmp_path: Path,
) -> None:
    path = tmp_path / "policy.toml"
    path.write_text(NO_ADDRESS, encoding="utf-8")
    db, root = tmp_path / "s.db", tmp_path / "shared"
    run_id = await submit(db, options(root, policy=path))
    path.write_text(ANYTHING, encoding="utf-8")  # edited once submitted: not the run's
    store = await open_store(db)
    try:
        await with_a_worker(db, lambda: ended(store, run_id))
        log = await stored(store, run_id)
        assert _in_force(log) == [NO_ADDRESS]
        _address_denied(log)
        assert "update_delivery_address" not in [w["tool"] for w in writes(root, run_id)]
        # Its fork too, its file gone: the run's policy is its text, not its file.
        path.unlink()
        forked = await fork(db, run_id, "c3")
        await with_a_worker(db, lambda: ended(store, forked))
        log = await stored(store, forked)
        assert _in_force(log) == [NO_ADDRESS]
        _address_denied(log)
    finally:
        await store.close()


async def _under_policy(root: Path, run_id: str, policy: Path) -> list[Event]:
    """The events of a run under `policy` as it goes when no worker is lost."""
    bus = EventBus()
    events: list[Event] = []
    bus.subscribe(events.append)
    prepared = prepare_run(options(root, run_id=run_id, policy=policy), bus=bus)
    prepared.runtime.env.reopen(run_id)  # type: ignore[attr-defined]
    record_inputs(prepared.runtime)
    try:
        await prepared.runtime.run()
    finally:
        prepared.cleanup()
    return events


async def test_a_run_going_on_from_its_log_keeps_its_policy_whatever_its_file_says_now(
    tmp_path: Path,
) -> None:
    path = tmp_path / "policy.toml"
    path.write_text(NO_ADDRESS, encoding="utf-8")
    whole = await _under_policy(tmp_path / "first", "r1", path)
    cut = next(i for i, e in enumerate(whole) if isinstance(e, PolicyInForce)) + 1
    db, root = tmp_path / "s.db", tmp_path / "shared"
    store = await open_store(db)
    try:
        run = options(root, run_id="r1", policy=path)
        await left_by_a_lost_worker(store, root, "r1", whole[:cut], run)
        path.write_text(ANYTHING, encoding="utf-8")  # edited while no worker held it
        await with_a_worker(db, lambda: ended(store, "r1"))
        log = await stored(store, "r1")
        stop = log[-1]
        assert isinstance(stop, RunStopped) and stop.stop_reason.value != "crashed", stop
        assert significant(log) == significant(whole)
        assert _in_force(log) == [NO_ADDRESS]
        _address_denied(log)
    finally:
        await store.close()


@pytest.fixture
def run_under_policy(cli: Callable[..., Any], tmp_path: Path) -> tuple[Path, str, Path]:
    """An order_support run (two address updates, c2 and c3) recorded as `loopdeck run
    --policy FILE` records it (not submitted), its policy denying the address update: its
    store, its id, the file."""
    db, path = tmp_path / "s.db", tmp_path / "policy.toml"
    path.write_text(NO_ADDRESS, encoding="utf-8")
    code, done, err = cli("run", "order_support", "--script", "double-write", "--headless",
                          "--json", "--policy", str(path), "--db", str(db))  # fmt: skip
    assert code in (0, 1) and done is not None, err
    return db, str(done["run_id"]), path


@pytest.mark.parametrize("at", ["c2", "c3"])  # before its first ask, after it
async def test_a_fork_is_decided_under_its_sources_recorded_policy(
    run_under_policy: tuple[Path, str, Path], at: str
) -> None:
    db, source, path = run_under_policy
    path.write_text(ANYTHING, encoding="utf-8")  # neither the file nor its absence counts
    store = await open_store(db)
    try:
        assert _in_force(await stored(store, source)) == [NO_ADDRESS]
        forked = await fork(db, source, at)
        path.unlink()
        await with_a_worker(db, lambda: ended(store, forked))
        log = await stored(store, forked)
        stop = log[-1]
        assert isinstance(stop, RunStopped) and stop.stop_reason.value != "crashed", stop
        assert _in_force(log) == [NO_ADDRESS]
        _address_denied(log)
    finally:
        await store.close()


async def test_a_write_decided_while_away_and_never_taken_is_not_run_when_the_run_crashes(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    path = tmp_path / "policy.toml"
    path.write_text(NO_ADDRESS, encoding="utf-8")
    whole = await _under_policy(tmp_path / "first", "r1", path)
    asked = next(i for i, e in enumerate(whole) if isinstance(e, ApprovalRequested))
    db, root = tmp_path / "s.db", tmp_path / "shared"
    store = await open_store(db)
    try:
        run = options(root, approve="wait", run_id="r1")
        await left_by_a_lost_worker(store, root, "r1", whole[: asked + 1], run)
        call = whole[asked].call_id  # type: ignore[union-attr]
        assert [p["call_id"] for p in await queries.pending_approvals(store, "r1")] == [call]
        decision = ApprovalDecision(call_id=call, approved=True, by="operator")
        assert await deciding.decide(store, "r1", decision)

        def cannot(*args: Any, **kwargs: Any) -> Any:
            raise RuntimeError("no such env here")

        monkeypatch.setattr("loopdeck.operator.leased_run.prepare_run", cannot)
        await with_a_worker(db, lambda: ended(store, "r1"))
        log = await stored(store, "r1")
        stop = log[-1]
        assert isinstance(stop, RunStopped) and stop.stop_reason.value == "crashed"
        assert not any(isinstance(e, ApprovalDecided) for e in log)
        finished = [e for e in log if isinstance(e, ToolFinished) and e.call_id == call]
        assert [e.status for e in finished] == [CallStatus.WITHDRAWN]
        assert "not run" in str(finished[0].result)
        assert await outcome_queries.outcome_unknown(store, "r1") == []
        assert writes(root, "r1") == []
    finally:
        await store.close()


def test_a_rebuild_that_left_its_log_under_another_policy_says_so_in_words() -> None:
    from types import SimpleNamespace

    from loopdeck.core.replay_log import ReplayLog
    from loopdeck.operator.crashed_run import diverged_words

    level = {"level": "run", "path": "/p/policy.toml", "sha256": "a" * 64, "mode": "enforce",
             "text": NO_ADDRESS}  # fmt: skip
    logged = PolicyInForce(run_id="r1", seq=7, sha256="b" * 64, levels=[level], run_kind="x")
    replay = ReplayLog([logged])
    replay.diverged = "the run could not be rebuilt from its log: at event 7 (policy_in_force)"
    policy = SimpleNamespace(gate=None)
    runtime = SimpleNamespace(calls=SimpleNamespace(approvals=SimpleNamespace(policy=policy)))
    said = diverged_words(runtime, replay)  # type: ignore[arg-type]
    assert said.startswith(replay.diverged)
    assert "decided under policy sha256 bbbbbbbbbbbb (run /p/policy.toml)" in said
    assert said.endswith("the rebuilt run has no policy")


# A rule today's load refuses (a condition that reads nothing and is no bool), which the load
# a run was recorded under took: at every ask it failed, and an allow that fails holds nothing.
STALE = NO_ADDRESS + '[[rule]]\nid = "stale"\neffect = "allow"\nwhen = \'"1"\'\n'


@pytest.fixture
def load_of_before(monkeypatch: pytest.MonkeyPatch) -> Callable[[], None]:
    """While it lasts, a policy loads as before the checks made when it is read: a condition
    is parsed, nothing more. Returns what ends it."""
    from loopdeck.policy import expressions

    def unchecked(condition: expressions.Condition, tree: Any) -> None:
        condition._program = expressions._program(tree)

    monkeypatch.setattr(expressions.Condition, "_checked", unchecked)
    return monkeypatch.undo


async def test_a_run_recorded_under_a_policy_todays_load_refuses_goes_on_under_it(
    load_of_before: Callable[[], None], tmp_path: Path
) -> None:
    path = tmp_path / "policy.toml"
    path.write_text(STALE, encoding="utf-8")
    whole = await _under_policy(tmp_path / "first", "r1", path)
    load_of_before()
    cut = next(i for i, e in enumerate(whole) if isinstance(e, PolicyInForce)) + 1
    db, root = tmp_path / "s.db", tmp_path / "shared"
    store = await open_store(db)
    try:
        run = options(root, run_id="r1", policy=path)
        await left_by_a_lost_worker(store, root, "r1", whole[:cut], run)
        await with_a_worker(db, lambda: ended(store, "r1"))
        log = await stored(store, "r1")
        stop = log[-1]
        assert isinstance(stop, RunStopped) and stop.stop_reason.value != "crashed", stop
        assert significant(log) == significant(whole)
        assert _in_force(log) == [STALE]
        _address_denied(log)
    finally:
        await store.close()


async def test_a_fork_of_a_run_whose_policy_todays_load_refuses_says_so_and_is_decided_under_it(
    cli: Callable[..., Any], load_of_before: Callable[[], None], tmp_path: Path
) -> None:
    db, path = tmp_path / "s.db", tmp_path / "policy.toml"
    path.write_text(STALE, encoding="utf-8")
    code, done, err = await asyncio.to_thread(
        cli, "run", "order_support", "--script", "double-write", "--headless", "--json",
        "--policy", str(path), "--db", str(db),
    )  # fmt: skip
    assert code in (0, 1) and done is not None, err
    source = str(done["run_id"])
    load_of_before()
    code, done, err = await asyncio.to_thread(
        cli, "fork", source, "--at", "c3", "--db", str(db), "--json"
    )
    assert code == 0 and done is not None, err
    assert f"run {source}'s recorded policy would be refused if read today" in err, err
    assert "rule 2 (stale): when: it reads no attribute and always fails" in err, err
    store = await open_store(db)
    try:
        forked = str(done["run_id"])
        await with_a_worker(db, lambda: ended(store, forked))
        log = await stored(store, forked)
        stop = log[-1]
        assert isinstance(stop, RunStopped) and stop.stop_reason.value != "crashed", stop
        assert _in_force(log) == [STALE]
        _address_denied(log)
    finally:
        await store.close()


async def test_a_run_queued_before_policies_were_recorded_is_refused_by_name(
    tmp_path: Path,
) -> None:
    """Its options keep only its policy's path (no text checked at submit): its worker does
    not read today's file in its stead; it refuses the run, saying to submit it again."""
    from loopdeck.operator.placement import submitted
    from loopdeck.store import leases

    path = tmp_path / "policy.toml"
    path.write_text(ANYTHING, encoding="utf-8")  # not what it was when the run was queued
    db, root = tmp_path / "s.db", tmp_path / "shared"
    old = submitted(options(root, policy=path))
    del old["policy_levels"]
    store = await open_store(db)
    try:
        await leases.submit(store, "r-old", old)
        await with_a_worker(db, lambda: ended(store, "r-old"))
        log = await stored(store, "r-old")
    finally:
        await store.close()
    stop = log[-1]
    assert isinstance(stop, RunStopped) and stop.stop_reason.value == "crashed", stop
    assert "queued before policies were recorded" in stop.detail
    assert "submit it again" in stop.detail and str(path) in stop.detail
    assert not any(isinstance(e, PolicyInForce | ToolFinished) for e in log)
    assert writes(root, "r-old") == []


# CEL's `||` absorbs an error: a rule today's load refuses (an unknown name) can still hold.
ABSORBED = (
    '[[rule]]\nid = "absorbed"\neffect = "allow"\n'
    "when = 'nosuch == 1 || call.tool == \"update_delivery_address\"'\n"
)


def test_a_recorded_rule_todays_load_refuses_holds_only_while_its_run_is_rebuilt() -> None:
    """Evaluated, it would allow the call; it does only while a rebuild follows its run's
    log (which it then decides as the run did). A queued run, and a rebuilt one once live,
    decide calls nobody decided before: the rule fails, closed, and allows nothing."""
    from loopdeck.policy.cases import case_facts
    from loopdeck.policy.document import PolicyCase
    from loopdeck.policy.loading import recorded_run_policy

    level = {"level": "run", "path": "/p/policy.toml", "text": ABSORBED}
    case = PolicyCase.model_validate(
        {"call": {"tool": "update_delivery_address"}, "expect": "allow"}
    )
    queued = recorded_run_policy([level], "scripted")
    verdict = queued.decide(case_facts(case), None)
    assert verdict.effect == "none", verdict
    assert "would be refused if read today (unknown name 'nosuch'" in verdict.errors[0]
    rebuilt = recorded_run_policy([level], "scripted")
    live = rebuilt.rebuilding()
    assert rebuilt.decide(case_facts(case), None).effect == "allow"
    live()
    assert rebuilt.decide(case_facts(case), None).effect == "none"


async def test_a_run_rebuilt_from_its_log_decides_as_it_did_under_a_rule_todays_load_refuses(
    load_of_before: Callable[[], None], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from loopdeck.policy.gate import RunPolicy

    path = tmp_path / "policy.toml"
    path.write_text(ABSORBED, encoding="utf-8")
    whole = await _under_policy(tmp_path / "first", "r1", path)
    load_of_before()
    allowed = [e for e in whole if isinstance(e, PolicyDecided) and e.effect == "allow"]
    cut = whole.index(allowed[0]) + 2  # its log has the rule's allow, and the ask after it
    rebuilt: list[tuple[str, str]] = []
    decide = RunPolicy.decide

    def heard(gate: RunPolicy, facts: dict[str, Any], grant: Any) -> Any:
        verdict = decide(gate, facts, grant)
        rebuilt.append((facts["call"]["id"], verdict.effect))
        return verdict

    monkeypatch.setattr(RunPolicy, "decide", heard)
    db, root = tmp_path / "s.db", tmp_path / "shared"
    store = await open_store(db)
    try:
        run = options(root, run_id="r1", policy=path)
        await left_by_a_lost_worker(store, root, "r1", whole[:cut], run)
        await with_a_worker(db, lambda: ended(store, "r1"))
        log = await stored(store, "r1")
        stop = log[-1]
        assert isinstance(stop, RunStopped) and stop.stop_reason.value != "crashed", stop
        assert significant(log) == significant(whole)
        assert (allowed[0].call_id, "allow") in rebuilt  # as the run's load evaluated it
    finally:
        await store.close()


async def test_a_fork_past_its_fork_point_never_allows_by_a_rule_todays_load_refuses(
    cli: Callable[..., Any], load_of_before: Callable[[], None], tmp_path: Path
) -> None:
    db, path = tmp_path / "s.db", tmp_path / "policy.toml"
    path.write_text(ABSORBED, encoding="utf-8")
    code, done, err = await asyncio.to_thread(
        cli, "run", "order_support", "--script", "double-write", "--headless", "--json",
        "--policy", str(path), "--db", str(db),
    )  # fmt: skip
    assert code in (0, 1) and done is not None, err
    source = str(done["run_id"])
    load_of_before()
    code, done, err = await asyncio.to_thread(
        cli, "fork", source, "--at", "c2", "--db", str(db), "--json"
    )
    assert code == 0 and done is not None, err
    assert "past it that rule is not evaluated: it fails at every ask, closed" in err, err
    store = await open_store(db)
    try:
        ran = [e for e in await stored(store, source) if isinstance(e, PolicyDecided)]
        assert [(e.call_id, e.effect) for e in ran] == [("c2", "allow")]  # as its load read it
        forked = str(done["run_id"])
        await with_a_worker(db, lambda: ended(store, forked))
        log = await stored(store, forked)
        stop = log[-1]
        assert isinstance(stop, RunStopped) and stop.stop_reason.value != "crashed", stop
        said = [e for e in log if isinstance(e, PolicyDecided)]
        assert said and said[0].effect == "none", said  # past the fork: not evaluated
        assert "would be refused if read today" in said[0].errors[0]
    finally:
        await store.close()


async def test_a_run_queued_before_policies_were_recorded_that_asked_under_none_goes_on(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Its log asked with no `PolicyInForce` (a policy records itself before the first ask it
    rules): it had no policy, and goes on under none, not refused for its options' lack."""
    import worker_helpers

    from loopdeck.operator.placement import submitted

    def queued_before(run: Any) -> dict[str, Any]:
        kept = submitted(run)
        del kept["policy_levels"]
        return kept

    monkeypatch.setattr(worker_helpers, "submitted", queued_before)
    whole = await worker_helpers.uninterrupted(tmp_path / "first", "r1")
    asked = next(i for i, e in enumerate(whole) if isinstance(e, ApprovalRequested))
    assert not any(isinstance(e, PolicyInForce) for e in whole)
    db, root = tmp_path / "s.db", tmp_path / "shared"
    store = await open_store(db)
    try:
        await left_by_a_lost_worker(store, root, "r1", whole[: asked + 1], options(root))
        await with_a_worker(db, lambda: ended(store, "r1"))
        log = await stored(store, "r1")
    finally:
        await store.close()
    stop = log[-1]
    assert isinstance(stop, RunStopped) and stop.stop_reason.value != "crashed", stop
    assert significant(log) == significant(whole)
