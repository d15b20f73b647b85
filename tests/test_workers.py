"""Runs placed on workers (issue 42): claims and leases with an epoch, the fence on every
commit, and a run that goes on from its log in another worker after its own was lost."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from worker_helpers import (
    lease_state,
    left_by_a_lost_worker,
    options,
    significant,
    stored,
    uninterrupted,
    with_a_worker,
    writes,
)

from loopdeck.core.control import Interrupted
from loopdeck.core.events import (
    ApprovalDecided,
    ApprovalRequested,
    RunMoved,
    RunStarted,
    RunStopped,
    ToolFinished,
)
from loopdeck.core.outcome import CallStatus
from loopdeck.operator.entries import run_entry
from loopdeck.operator.placement import submit, submitted
from loopdeck.store import deciding, leases, outcome_queries, queries
from loopdeck.store.base import Location
from loopdeck.store.opening import open_store
from loopdeck.store.replay import bring_back_spills
from loopdeck.store.spill import Spill
from loopdeck.store.verification import verify_run
from loopdeck.store.writer import EventWriter

A = leases.WorkerName("host-a", 101, "aaaa")
B = leases.WorkerName("host-b", 202, "bbbb")


async def test_each_queued_run_is_claimed_once_and_a_stale_epoch_appends_nothing(
    db: Location, tmp_path: Path
) -> None:
    store = await open_store(db)
    try:
        for name in ("r1", "r2"):
            await leases.submit(store, name, submitted(options(tmp_path, run_id=name)))
        first = await leases.claim(store, A, 30)
        second = await leases.claim(store, B, 30)
        assert first is not None and second is not None
        assert {first.run_id, second.run_id} == {"r1", "r2"}
        assert (first.epoch, first.note) == (1, "started on host-a")
        assert first.first and second.first  # no worker held them: no log to read
        assert await leases.claim(store, B, 30) is None  # every run is held
        # host-a's lease runs out (its store was down): host-a does not claim its own run
        # again (its renewal confirms it); host-b takes it under the next epoch
        await store.execute("UPDATE leases SET expires_at = ? WHERE run_id = ?",
                            (time.time() - 5, first.run_id))  # fmt: skip
        assert await leases.claim(store, A, 30) is None
        moved = await leases.claim(store, B, 30)
        assert moved is not None and (moved.run_id, moved.epoch) == (first.run_id, 2)
        assert moved.note.startswith("resumed on host-b after host-a's lease expired")
        assert not moved.first  # its log is read: host-a may have written some of it
        stale = EventWriter(store, fence=(first.run_id, first.epoch))
        event = RunStarted(run_id=first.run_id, seq=1, env="e", script=None, model="m",
                           mode="rounds", goal="g", budget={})  # fmt: skip
        stale(event)
        lost: list[str] = []
        stale.on_lease_lost = lambda exc: lost.append(str(exc))
        with pytest.raises(leases.LeaseLost):
            await stale.flush()
        assert lost and "epoch 1 may append nothing more" in lost[0]
        stale(event)  # kept no more
        await stale.close()
        assert await stored(store, first.run_id) == []
        current = EventWriter(store, fence=(first.run_id, moved.epoch))
        current(event)
        await current.flush()
        assert [e.seq for e in await stored(store, first.run_id)] == [1]
    finally:
        await store.close()


async def test_a_stale_workers_spill_is_dropped_never_written(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    store = await open_store(db)
    try:
        await leases.submit(store, "r1", submitted(options(tmp_path, run_id="r1")))
        old = await leases.claim(store, A, 30)
        assert old is not None
        await store.execute("UPDATE leases SET expires_at = 0 WHERE run_id = 'r1'")
        assert await leases.claim(store, B, 30) is not None  # the lease moved on
        header = {"run_id": "r1", "pid": 1, "host": "host-a", "pid_started": None,
                  "approve_mode": "auto", "epoch": 1}  # fmt: skip
        spill = Spill(store.path, header)
        event = RunStarted(run_id="r1", seq=1, env="e", script=None, model="m", mode="rounds",
                           goal="g", budget={})  # fmt: skip
        path = spill.write([event.model_dump_json()])
        spill.release(remove=False)
        notes = await bring_back_spills(store)
        assert path is not None and not path.exists()
        assert "dropped, never written" in notes[0]
        assert await stored(store, "r1") == []
    finally:
        await store.close()


async def test_a_worker_runs_submitted_runs_to_their_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each to its end, and each waiting for its quick env code only when no other run has
    work due: a worker's loop drives all its runs, and one run's wait would hold up the
    others' turns (as under a console)."""
    from loopdeck.core.runtime import Runtime
    from loopdeck.tuning.loop_idle import nothing_else_due

    waits: list[object] = []
    original = Runtime.run

    async def run(self: Runtime) -> object:
        waits.append(self.env_thread.only_when_idle)
        return await original(self)

    monkeypatch.setattr(Runtime, "run", run)
    db = tmp_path / "s.db"
    ids = [await submit(db, options(tmp_path)) for _ in range(3)]
    store = await open_store(db)
    try:

        async def all_ended() -> bool:
            return [await lease_state(store, run_id) for run_id in ids] == ["ended"] * 3

        await with_a_worker(db, all_ended, slots=2)
        for run_id in ids:
            row = await queries.run_row(store, run_id)
            assert row is not None and row["stop_reason"] == "goal_met"
            assert [w["tool"] for w in writes(tmp_path, run_id)] == [
                "add_note", "update_delivery_address"
            ]  # fmt: skip
    finally:
        await store.close()
    assert waits == [nothing_else_due] * 3


async def test_a_claim_is_timed_from_when_it_runs_not_from_its_wait_for_a_connection(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A claim that waits for the store's connection (a worker's runs commit on the same few)
    moves the run, and starts its lease, when its statements go: the wait is the run's time
    in the queue, and a lease stamped before it would expire sooner than its worker counts."""
    import contextlib

    db = tmp_path / "s.db"
    run_id = await submit(db, options(tmp_path))
    store = await open_store(db)
    original = store.transaction
    waiting, free = asyncio.Event(), asyncio.Event()

    @contextlib.asynccontextmanager
    async def transaction(*args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        waiting.set()
        await free.wait()  # the connection is in another's hands until then
        async with original(*args, **kwargs) as tx:
            yield tx

    monkeypatch.setattr(store, "transaction", transaction)
    try:
        claiming = asyncio.create_task(leases.claim(store, A, 10.0))
        await waiting.wait()
        freed = time.time()
        free.set()
        claim = await claiming
        assert claim is not None and claim.run_id == run_id
        row = await leases.placement(store, run_id)
    finally:
        await store.close()
    assert row is not None and row["moved_at"] >= freed
    assert row["expires_at"] >= freed + 10.0


async def test_a_worker_claims_its_next_run_once_the_last_ones_start_is_stored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker takes no more runs than it can start and record: its next claim waits for
    the last run's first commit (a loaded worker's claims slow down with its commits, instead
    of piling runs up that wait on them)."""
    stored_runs: set[str] = set()
    seen_at_claims: list[set[str]] = []
    commit, claim = EventWriter.commit, leases.claim

    async def committing(self: EventWriter, batch: Any) -> None:
        await commit(self, batch)
        stored_runs.add(batch[0][0].run_id)

    async def claiming(*args: Any, **kwargs: Any) -> leases.Claim | None:
        seen_at_claims.append(set(stored_runs))
        return await claim(*args, **kwargs)

    monkeypatch.setattr(EventWriter, "commit", committing)
    monkeypatch.setattr(leases, "claim", claiming)
    db = tmp_path / "s.db"
    first, second = await submit(db, options(tmp_path)), await submit(db, options(tmp_path))
    store = await open_store(db)
    try:

        async def both_ended() -> bool:
            return [await lease_state(store, r) for r in (first, second)] == ["ended"] * 2

        await with_a_worker(db, both_ended, slots=2)
    finally:
        await store.close()
    assert seen_at_claims[0] == set() and first in seen_at_claims[1]


async def test_a_stopping_worker_is_not_held_up_by_a_first_commit_the_store_has_not_taken(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its next claim waits for the last run's start to be stored; its stop does not: it
    begins handing its runs back at once, however long its leases."""
    from worker_helpers import BOUND_S

    from loopdeck.operator.worker import Worker

    monkeypatch.setenv("LOOPDECK_LEASE_S", "600")
    held, free = asyncio.Event(), asyncio.Event()
    commit = EventWriter.commit

    async def committing(self: EventWriter, batch: Any) -> None:
        held.set()
        await free.wait()  # the store does not take it for now
        await commit(self, batch)

    monkeypatch.setattr(EventWriter, "commit", committing)
    db = tmp_path / "s.db"
    run_id = await submit(db, options(tmp_path))
    worker, stop = Worker(db, slots=2, say=lambda line: None), asyncio.Event()
    task = asyncio.create_task(worker.run(stop))
    try:
        await asyncio.wait_for(held.wait(), BOUND_S)
        stop.set()
        end = time.monotonic() + BOUND_S
        while (run := worker.leased.get(run_id)) is None or run.handing_back is None:
            assert time.monotonic() < end, "the stop waited for the run's first commit"
            await asyncio.sleep(0.05)
    finally:
        stop.set()
        free.set()
        await task


async def test_a_claim_says_whether_a_command_waited_for_its_run(tmp_path: Path) -> None:
    """Its worker catches up on the commands sent to a queued run before the run's first act,
    and reads nothing for it at once when none waited."""
    db = tmp_path / "s.db"
    quiet, told = await submit(db, options(tmp_path)), await submit(db, options(tmp_path))
    store = await open_store(db)
    try:
        await queries.send_command(store, told, "pause", "operator")
        first, second = await leases.claim(store, A, 10.0), await leases.claim(store, A, 10.0)
    finally:
        await store.close()
    assert first is not None and (first.run_id, first.sent) == (quiet, False)
    assert second is not None and (second.run_id, second.sent) == (told, True)


async def test_a_claimed_runs_env_is_reopened_on_its_own_env_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its `reopen` is env code: run where the run's other env code runs (its env thread),
    never on a pool the worker's other runs share (a claimed run's start queued there behind
    their model calls)."""
    import threading

    from loopdeck.operator import leased_run

    threads: dict[str, set[int]] = {"reopen": set(), "snapshot": set()}
    original = leased_run.prepare_run

    def prepare_run(*args: object, **kwargs: object) -> object:
        prepared = original(*args, **kwargs)  # type: ignore[arg-type]
        env = prepared.runtime.env
        for name in threads:
            code = getattr(env, name)

            def on_its_thread(*a: object, _name: str = name, _code: object = code) -> object:
                threads[_name].add(threading.get_ident())
                return _code(*a)  # type: ignore[operator]

            setattr(env, name, on_its_thread)
        return prepared

    monkeypatch.setattr(leased_run, "prepare_run", prepare_run)
    db = tmp_path / "s.db"
    run_id = await submit(db, options(tmp_path))
    store = await open_store(db)
    try:

        async def ended() -> bool:
            return await lease_state(store, run_id) == "ended"

        await with_a_worker(db, ended)
    finally:
        await store.close()
    assert len(threads["reopen"]) == 1 and threads["reopen"] == threads["snapshot"]


@pytest.mark.parametrize("lost_after", ["plan_written", "call_proposed", "tool_finished"])
async def test_a_run_goes_on_from_its_log_as_if_its_worker_was_never_lost(
    lost_after: str, tmp_path: Path
) -> None:
    """Lost after its first event of that kind, the run is rebuilt from its log on another
    worker and makes the same events an uninterrupted run makes; what ran before the loss
    is not run again."""
    whole = await uninterrupted(tmp_path / "first", "r1")
    cut = next(i for i, e in enumerate(whole) if e.kind == lost_after) + 1
    db = tmp_path / "s.db"
    store = await open_store(db)
    try:
        root = tmp_path / "shared"
        await left_by_a_lost_worker(store, root, "r1", whole[:cut], options(root, run_id="r1"))

        async def ended() -> bool:
            return await lease_state(store, "r1") == "ended"

        await with_a_worker(db, ended)
        log = await stored(store, "r1")
        assert [e.seq for e in log] == list(range(1, len(log) + 1))
        assert significant(log) == significant(whole)
        moved = [e for e in log if isinstance(e, RunMoved)]
        assert len(moved) == 1 and moved[0].after_seq == cut and moved[0].was == "host-a"
        assert "lease expired" in moved[0].note
        proof = await verify_run(store, "r1")
        assert proof.broken is None and proof.events == len(log)
        ran_before = {e.call_id for e in whole[:cut] if isinstance(e, ToolFinished)}
        ran_after = [w["tool"] for w in writes(root, "r1")]
        assert ran_after == [
            e.tool for e in whole if isinstance(e, ToolFinished) and e.call_id not in ran_before
            and e.tool in ("add_note", "update_delivery_address")
        ]  # fmt: skip
    finally:
        await store.close()


async def test_a_write_in_flight_when_the_worker_was_lost_is_outcome_unknown(
    tmp_path: Path,
) -> None:
    whole = await uninterrupted(tmp_path / "first", "r1")
    approved = next(i for i, e in enumerate(whole) if isinstance(e, ApprovalDecided))
    db = tmp_path / "s.db"
    store = await open_store(db)
    try:
        root = tmp_path / "shared"
        await left_by_a_lost_worker(
            store, root, "r1", whole[: approved + 1], options(root, run_id="r1")
        )

        async def ended() -> bool:
            return await lease_state(store, "r1") == "ended"

        await with_a_worker(db, ended)
        log = await stored(store, "r1")
        call = whole[approved].call_id  # type: ignore[union-attr]
        finished = [e for e in log if isinstance(e, ToolFinished) and e.call_id == call]
        assert [e.status for e in finished] == [CallStatus.OUTCOME_UNKNOWN]
        assert "not run again" in json.dumps(finished[0].result)
        assert "add_note" not in [w["tool"] for w in writes(root, "r1")]  # never run here
        assert call in await outcome_queries.outcome_unknown(store, "r1")
    finally:
        await store.close()


async def test_a_decision_made_while_no_worker_held_the_run_is_taken(tmp_path: Path) -> None:
    whole = await uninterrupted(tmp_path / "first", "r1")
    asked = next(i for i, e in enumerate(whole) if isinstance(e, ApprovalRequested))
    db = tmp_path / "s.db"
    store = await open_store(db)
    try:
        root = tmp_path / "shared"
        run = options(root, approve="wait", run_id="r1")
        await left_by_a_lost_worker(store, root, "r1", whole[: asked + 1], run)
        call = whole[asked].call_id  # type: ignore[union-attr]
        decision = queries.pending_approvals
        assert [p["call_id"] for p in await decision(store, "r1")] == [call]
        from loopdeck.core.approvals import ApprovalDecision

        assert await deciding.decide(
            store, "r1", ApprovalDecision(call_id=call, approved=True, by="operator")
        )

        async def waits_again() -> bool:  # the next write waits: approve it too
            for item in await queries.pending_approvals(store, "r1"):
                await deciding.decide(store, "r1", ApprovalDecision(
                    call_id=item["call_id"], approved=True, by="operator"))  # fmt: skip
            return await lease_state(store, "r1") == "ended"

        await with_a_worker(db, waits_again)
        log = await stored(store, "r1")
        decided = [e for e in log if isinstance(e, ApprovalDecided) and e.call_id == call]
        assert [(e.approved, e.by) for e in decided] == [(True, "operator")]
        assert isinstance(log[-1], RunStopped) and log[-1].stop_reason.value == "goal_met"
        assert [w["tool"] for w in writes(root, "r1")] == ["add_note", "update_delivery_address"]
    finally:
        await store.close()


async def test_an_env_that_keeps_its_state_in_memory_ends_crashed_naming_why(
    tmp_path: Path,
) -> None:
    from conftest import SAMPLES

    from loopdeck.core.events import EventBus
    from loopdeck.core.recorded_inputs import record_inputs
    from loopdeck.operator.launch import RunOptions, prepare_run

    run = RunOptions(env=str(SAMPLES / "order_support"), script="solve", approve="auto",
                     run_id="r1")  # fmt: skip
    bus = EventBus()
    whole: list = []
    bus.subscribe(whole.append)
    prepared = prepare_run(run, bus=bus)
    record_inputs(prepared.runtime)
    await prepared.runtime.run()
    prepared.cleanup()
    cut = next(i for i, e in enumerate(whole) if e.kind == "tool_finished") + 1
    db = tmp_path / "s.db"
    store = await open_store(db)
    try:
        await leases.submit(store, "r1", submitted(run))
        claim = await leases.claim(store, A, 0.001)
        assert claim is not None
        writer = EventWriter(store, approve_mode="auto", fence=("r1", claim.epoch))
        await writer.write_back(whole[:cut])

        async def ended() -> bool:
            return await lease_state(store, "r1") == "ended"

        await with_a_worker(db, ended)
        log = await stored(store, "r1")
        assert [e.seq for e in log] == list(range(1, cut + 2))
        stop = log[-1]
        assert isinstance(stop, RunStopped) and stop.stop_reason.value == "crashed"
        said = "its worker was lost and it cannot go on: its env (OrderSupport) keeps its state"
        assert stop.detail.startswith(said + " in its worker's memory"), stop.detail
        assert "OrderSupport" in stop.detail
    finally:
        await store.close()


async def test_a_run_waiting_on_its_operator_is_parked_and_goes_on_when_decided(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Its slot freed while it waits (another run takes it), the run comes back to a worker
    when its write is decided, and no write or decision is lost or doubled."""
    from loopdeck.core.approvals import ApprovalDecision

    monkeypatch.setenv("LOOPDECK_PARK_AFTER_S", "0.5")
    db = tmp_path / "s.db"
    waiting = await submit(db, options(tmp_path, approve="wait"))
    other = await submit(db, options(tmp_path))  # claimed only once the first one is parked
    store = await open_store(db)
    try:
        decided: list[str] = []

        async def both_ended() -> bool:
            other_ended = await lease_state(store, other) == "ended"
            if other_ended and await lease_state(store, waiting) == "parked":
                for item in await queries.pending_approvals(store, waiting):
                    decision = ApprovalDecision(call_id=item["call_id"], approved=True,
                                                by="operator")  # fmt: skip
                    if await deciding.decide(store, waiting, decision):
                        decided.append(item["call_id"])
            return [await lease_state(store, r) for r in (waiting, other)] == ["ended"] * 2

        worker = await with_a_worker(db, both_ended, slots=1)
        said = worker.said  # type: ignore[attr-defined]
        assert any(line.startswith(f"run {waiting}: parked by") for line in said), said
        log = await stored(store, waiting)
        assert [e.seq for e in log] == list(range(1, len(log) + 1))
        assert isinstance(log[-1], RunStopped) and log[-1].stop_reason.value == "goal_met"
        moves = [e.note for e in log if isinstance(e, RunMoved)]
        assert moves and all("once its operator decided" in note for note in moves)
        by_operator = [e.call_id for e in log if isinstance(e, ApprovalDecided)]
        assert by_operator == decided == ["c3", "c5"]
        assert [w["tool"] for w in writes(tmp_path, waiting)] == [
            "add_note", "update_delivery_address"
        ]  # fmt: skip
    finally:
        await store.close()


async def test_a_run_whose_env_lives_in_its_workers_memory_is_never_parked(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """No other worker could rebuild it: it holds its slot while its writes wait, and each
    decision is carried out as recorded (parked, a decision crashed it)."""
    from conftest import SAMPLES

    from loopdeck.core.approvals import ApprovalDecision
    from loopdeck.operator.launch import RunOptions

    monkeypatch.setenv("LOOPDECK_PARK_AFTER_S", "0.2")
    db = tmp_path / "s.db"
    run = RunOptions(env=str(SAMPLES / "order_support"), script="solve", approve="wait")
    run_id = await submit(db, run)
    store = await open_store(db)
    try:
        decided: list[str] = []
        waits: list[float] = []

        async def ended() -> bool:
            for item in await queries.pending_approvals(store, run_id):
                waits.append(time.monotonic())
                if waits[-1] - waits[0] < 1.0:  # past the park's 0.2 s, it waits on
                    continue
                decision = ApprovalDecision(call_id=item["call_id"], approved=True, by="op")
                if await deciding.decide(store, run_id, decision):
                    decided.append(item["call_id"])
            return await lease_state(store, run_id) == "ended"

        worker = await with_a_worker(db, ended)
        said = worker.said  # type: ignore[attr-defined]
        assert not any("parked by" in line for line in said), said
        log = await stored(store, run_id)
        assert isinstance(log[-1], RunStopped) and log[-1].stop_reason.value == "goal_met"
        assert [e.call_id for e in log if isinstance(e, ApprovalDecided)] == decided == ["c3"]
    finally:
        await store.close()


async def test_a_parked_request_that_expires_is_recorded_and_asked_again(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Woken by its request's expiry, the run says so (not "its operator decided"), records
    the expiry as a live run does and asks again, until it stops asking."""
    from loopdeck.core.events import ApprovalInvalidated, ApprovalRequested

    monkeypatch.setenv("LOOPDECK_PARK_AFTER_S", "0.2")
    db = tmp_path / "s.db"
    run = options(tmp_path, approve="wait")
    run.settings.append("approval_ttl_s=1")
    run_id = await submit(db, run)
    store = await open_store(db)
    try:

        async def ended() -> bool:
            return await lease_state(store, run_id) == "ended"

        await with_a_worker(db, ended)
        log = await stored(store, run_id)
        expired = [e for e in log if isinstance(e, ApprovalInvalidated)]
        assert len(expired) == 3 and all("expired unanswered" in e.problem for e in expired)
        assert len([e for e in log if isinstance(e, ApprovalRequested)]) == 3
        moves = [e.note for e in log if isinstance(e, RunMoved)]
        assert moves and all("once its request expired" in note for note in moves), moves
        assert not any(isinstance(e, ApprovalDecided) and e.approved for e in log)
        stop = log[-1]
        assert isinstance(stop, RunStopped) and stop.stop_reason.value == "policy_block"
        assert "could not be kept valid after 3 asks" in stop.detail
    finally:
        await store.close()


async def test_a_lease_unconfirmed_while_the_store_is_down_waits_for_the_stores_word() -> None:
    """No renewal for longer than a lease (the store down) holds the run, acting on nothing;
    the first renewal that reaches the store confirms it (nobody claimed it meanwhile), or
    says it moved; only past the run's store hold is it given up."""
    from loopdeck.operator.run_lease import Lease

    lease = Lease("r1", 1, hold_s=5.0)
    lease.outage_s = 60.0
    lease.valid_until = time.monotonic() - 20.0  # unconfirmed for four leases
    waiting = asyncio.create_task(lease.ensure())
    await asyncio.sleep(0)
    assert not waiting.done() and lease.lost is None
    lease.renewed(time.monotonic())  # the store is back, the run still this worker's
    await asyncio.wait_for(waiting, 30)
    lease.valid_until = time.monotonic() - 61.0  # past the run's store hold
    with pytest.raises(Interrupted, match="no renewal reached the store for 60s"):
        await lease.ensure()


async def test_a_stopping_worker_lets_its_runs_write_finish_then_hands_it_back(
    tmp_path: Path,
) -> None:
    """Stopped while an approved write runs: the write is carried out and recorded here,
    then the run goes back to the queue (killed mid-write, it was the next worker's
    `outcome_unknown`)."""
    db = tmp_path / "s.db"
    run = options(tmp_path)
    run.settings.append("data.step_s=0.5")
    run_id = await submit(db, run)
    store = await open_store(db)
    try:

        async def writing() -> bool:
            log = await stored(store, run_id)
            return any(isinstance(e, ApprovalDecided) and e.call_id == "c3" for e in log)

        await with_a_worker(db, writing)
        log = await stored(store, run_id)
        [finished] = [e for e in log if isinstance(e, ToolFinished) and e.call_id == "c3"]
        assert finished.status is CallStatus.EXECUTED
        assert await lease_state(store, run_id) == "queued"
        assert [w["tool"] for w in writes(tmp_path, run_id)] == ["add_note"]
    finally:
        await store.close()


async def test_a_workers_run_hears_messages_and_stops_when_cancelled(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    run = options(tmp_path)
    run.settings.append("data.step_s=0.3")
    run_id = await submit(db, run)
    store = await open_store(db)
    try:
        sent: list[str] = []

        async def cancelled() -> bool:
            log = await stored(store, run_id)
            if not sent and any(isinstance(e, ToolFinished) for e in log):
                await queries.send_message(store, run_id, "Mind the second order.", "operator")
                sent.append("message")
            elif sent == ["message"] and any(e.kind == "operator_message" for e in log):
                await queries.send_command(store, run_id, "cancel", "operator")
                sent.append("cancel")
            return await lease_state(store, run_id) == "ended"

        await with_a_worker(db, cancelled)
        log = await stored(store, run_id)
        assert sent == ["message", "cancel"]
        stop = log[-1]
        assert isinstance(stop, RunStopped) and stop.stop_reason.value == "cancelled"
        assert "stopped after current tools by operator" in stop.detail
    finally:
        await store.close()


@pytest.mark.slow
@pytest.mark.parametrize("events", [5, 200])  # one INSERT, and COPY
async def test_a_writers_batch_is_announced_by_one_notify(
    events: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    import psycopg
    from conftest import fresh_pg_database

    from loopdeck.core.events import ReviewVerdict
    from loopdeck.store.postgres import CHANNEL

    url = fresh_pg_database(monkeypatch)
    store = await open_store(url)
    listener = await psycopg.AsyncConnection.connect(url, autocommit=True)
    try:
        await listener.execute(f"LISTEN {CHANNEL}")
        await store.execute("SET track_functions = 'pl'")  # the writer's connection
        writer = EventWriter(store)
        writer(RunStarted(run_id="r1", seq=1, env="e", script=None, model="m", mode="rounds",
                          goal="g", budget={}))  # fmt: skip
        for seq in range(2, events + 1):
            writer(ReviewVerdict(run_id="r1", seq=seq, round=1, verdict="fail", reasons=[],
                                 before_hash="a", after_hash="b"))  # fmt: skip
        await writer.flush()
        heard = [note.payload async for note in listener.notifies(timeout=1.0)]
        assert heard == ["r1"]
        await store.fetchall("SELECT pg_stat_force_next_flush()")
        await store.fetchall("SELECT 1")  # the flush happens once this session is idle
        rows = await store.fetchall(
            "SELECT SUM(calls) FROM pg_stat_user_functions WHERE funcname LIKE 'loopdeck_notify%'"
        )
        assert int(rows[0][0]) == 1  # one trigger call for the whole batch, not one an event
    finally:
        await listener.close()
        await store.close()


async def test_a_stopping_worker_hands_its_runs_back_and_another_goes_on(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    run = options(tmp_path)
    run.settings.append("data.step_s=0.3")
    run_id = await submit(db, run)
    store = await open_store(db)
    try:

        async def under_way() -> bool:
            return any(isinstance(e, ToolFinished) for e in await stored(store, run_id))

        await with_a_worker(db, under_way)  # then stopped, as SIGTERM stops `loopdeck worker`
        row = await leases.placement(store, run_id)
        assert row is not None and row["state"] == "queued"
        assert row["note"].startswith("handed back by")
        entry = await run_entry(store, run_id)  # queued: none runs it (it named the worker)
        assert entry is not None and entry.runner == "-"

        async def ended() -> bool:
            return await lease_state(store, run_id) == "ended"

        await with_a_worker(db, ended)
        log = await stored(store, run_id)
        assert [e.seq for e in log] == list(range(1, len(log) + 1))
        assert log[-1].stop_reason.value == "goal_met"  # type: ignore[attr-defined]
        moved = [e.note for e in log if isinstance(e, RunMoved)]
        assert len(moved) == 1 and "handed it back" in moved[0]
        ran = [w["tool"] for w in writes(tmp_path, run_id)]
        assert ran == ["add_note", "update_delivery_address"]
    finally:
        await store.close()
