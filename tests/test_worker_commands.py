"""Commands sent to a run no worker held (queued, its lease run out, parked): the worker that
takes it up takes them before the run's first model call or tool, as a live run would have
taken them at its next checkpoint."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from worker_helpers import (
    lease_state,
    left_by_a_lost_worker,
    options,
    stored,
    uninterrupted,
    with_a_worker,
    writes,
)

from loopdeck.core.approvals import ApprovalDecision
from loopdeck.core.events import (
    ApprovalRequested,
    ModelReplied,
    OperatorCommand,
    RunMoved,
    RunStopped,
    ToolFinished,
)
from loopdeck.operator.worker import Worker
from loopdeck.store import deciding, queries
from loopdeck.store.base import Location, Store
from loopdeck.store.opening import open_store


async def _untaken(store: Store, run_id: str) -> list[str]:
    rows = await store.fetchall(
        "SELECT command FROM commands WHERE run_id = ? AND consumed_at IS NULL", (run_id,)
    )
    return [str(row[0]) for row in rows]


async def test_a_pause_sent_while_no_worker_held_the_run_holds_it_before_its_next_model_call(
    db: Location, tmp_path: Any
) -> None:
    """Its worker lost while c3 waited: c3 approved, then paused; the next worker takes the
    pause as it goes live: c3 is carried out, as a live run's reply's tools are, and the run
    holds before its next model call (it ran on to c5 and its end)."""
    whole = await uninterrupted(tmp_path / "first", "r1")
    asked = next(i for i, e in enumerate(whole) if isinstance(e, ApprovalRequested))
    call = whole[asked].call_id  # type: ignore[union-attr]
    store = await open_store(db)
    try:
        root = tmp_path / "shared"
        run = options(root, approve="wait", run_id="r1")
        await left_by_a_lost_worker(store, root, "r1", whole[: asked + 1], run)
        yes = ApprovalDecision(call_id=call, approved=True, by="operator")
        assert await deciding.decide(store, "r1", yes)
        assert await deciding.pause_or_resume(store, "r1", "pause", "operator") is None
        resumed: list[bool] = []

        async def ended() -> bool:  # once paused after c3: resumed, its next write approved
            log = await stored(store, "r1")
            if not resumed:
                ran = any(isinstance(e, ToolFinished) and e.call_id == call for e in log)
                if not (ran and any(isinstance(e, OperatorCommand) for e in log)):
                    return await lease_state(store, "r1") == "ended"
                assert await _untaken(store, "r1") == []
                assert await deciding.pause_or_resume(store, "r1", "resume", "operator") is None
                resumed.append(True)
            for item in await queries.pending_approvals(store, "r1"):
                await deciding.decide(store, "r1", ApprovalDecision(
                    call_id=item["call_id"], approved=True, by="operator"))  # fmt: skip
            return await lease_state(store, "r1") == "ended"

        await with_a_worker(db, ended)
        log = await stored(store, "r1")
        moved = next(i for i, e in enumerate(log) if isinstance(e, RunMoved))
        commands = [i for i, e in enumerate(log) if isinstance(e, OperatorCommand)]
        said = [(log[i].command, log[i].by) for i in commands]  # type: ignore[attr-defined]
        assert said == [("pause", "operator"), ("resume", "operator")]
        held = log[moved : commands[1]]  # from its move to its resume: c3, and no model call
        assert not any(isinstance(e, ModelReplied) for e in held)
        assert [e.call_id for e in held if isinstance(e, ToolFinished)] == [call]
        assert isinstance(log[-1], RunStopped) and log[-1].stop_reason.value == "goal_met"
        assert [w["tool"] for w in writes(root, "r1")] == ["add_note", "update_delivery_address"]
    finally:
        await store.close()


async def test_a_cancel_sent_to_a_queued_run_stops_it_before_its_first_model_call(
    db: Location, tmp_path: Any
) -> None:
    from loopdeck.operator.placement import submit

    run_id = await submit(db, options(tmp_path))
    store = await open_store(db)
    try:
        await queries.send_command(store, run_id, "cancel", "operator")

        async def ended() -> bool:
            return await lease_state(store, run_id) == "ended"

        await with_a_worker(db, ended)
        log = await stored(store, run_id)
        assert not any(isinstance(e, ModelReplied) for e in log)
        stop = log[-1]
        assert isinstance(stop, RunStopped) and stop.stop_reason.value == "cancelled"
        assert "by operator" in stop.detail
        assert writes(tmp_path, run_id) == []
        assert await _untaken(store, run_id) == []
    finally:
        await store.close()


async def left_unmovable(
    store: Store, run_id: str = "r1", approve: str = "auto", cut_after: str = "tool_finished"
) -> int:
    """An order_support run (its env keeps its state in its worker's memory) whose worker
    was lost after its first event of `cut_after`: its lease run out; its epoch."""
    from conftest import SAMPLES

    from loopdeck.core.events import EventBus
    from loopdeck.core.recorded_inputs import record_inputs
    from loopdeck.operator.launch import RunOptions, prepare_run
    from loopdeck.operator.placement import submitted
    from loopdeck.store import leases
    from loopdeck.store.writer import EventWriter

    run = RunOptions(env=str(SAMPLES / "order_support"), script="solve",
                     approve=approve, run_id=run_id)  # type: ignore[arg-type]  # fmt: skip
    bus = EventBus()
    whole: list[Any] = []
    bus.subscribe(whole.append)
    prepared = prepare_run(RunOptions(env=run.env, script="solve", approve="auto",
                                      run_id=run_id), bus=bus)  # fmt: skip
    record_inputs(prepared.runtime)
    await prepared.runtime.run()
    prepared.cleanup()
    cut = next(i for i, e in enumerate(whole) if e.kind == cut_after) + 1
    await leases.submit(store, run_id, submitted(run))
    claim = await leases.claim(store, leases.WorkerName("host-a", 1, "gone"), 0.001)
    assert claim is not None
    writer = EventWriter(store, approve_mode=approve, fence=(run_id, claim.epoch))
    await writer.write_back(whole[:cut])
    return claim.epoch


async def test_a_command_a_run_never_took_before_it_ended_is_said_not_carried_out(
    tmp_path: Any,
) -> None:
    from loopdeck.store import leases

    db = tmp_path / "s.db"
    store = await open_store(db)
    try:
        await left_unmovable(store)
        await queries.send_command(store, "r1", "pause", "operator")

        async def ended() -> bool:
            return await lease_state(store, "r1") == "ended"

        worker = await with_a_worker(db, ended)
        row = await leases.placement(store, "r1")
        assert row is not None and row["note"].startswith("crashed: ")
        assert row["note"].endswith("not carried out (the run had ended): pause from operator")
        said = worker.said  # type: ignore[attr-defined]
        assert "run r1: pause from operator not carried out: the run had ended" in said
        assert await _untaken(store, "r1") == []
    finally:
        await store.close()


async def test_a_worker_says_in_its_lease_that_a_run_it_holds_cannot_move(
    tmp_path: Any,
) -> None:
    from conftest import SAMPLES

    from loopdeck.operator.launch import RunOptions
    from loopdeck.operator.placement import submit
    from loopdeck.store import leases

    db = tmp_path / "s.db"
    run_id = await submit(db, RunOptions(env=str(SAMPLES / "order_support"), script="solve",
                                         approve="wait"))  # fmt: skip
    store = await open_store(db)
    try:

        async def pinned() -> bool:
            row = await leases.placement(store, run_id)
            return row is not None and row["unmovable"] is not None

        await with_a_worker(db, pinned)
        row = await leases.placement(store, run_id)
        assert row is not None and "(OrderSupport) keeps its state" in row["unmovable"]
    finally:
        await store.close()


def test_a_run_that_cannot_move_whose_lease_lapsed_is_said_stranded_and_refuses_decisions(
    tmp_path: Any, cli: Any
) -> None:
    """`runs` says it cannot go on; approve, reject and pause refuse it by name, exit 2, as
    for a runner that is gone: no worker would carry them out (the next one crashes it)."""
    import asyncio

    from loopdeck.store import leases

    db = tmp_path / "s.db"

    async def left() -> None:
        store = await open_store(db)
        try:
            epoch = await left_unmovable(store, approve="wait", cut_after="approval_requested")
            why = "its env (OrderSupport) keeps its state in its worker's memory"
            await leases.pin(store, "r1", epoch, why)
        finally:
            await store.close()

    asyncio.run(left())
    code, runs, err = cli("runs", "--json", "--db", str(db))
    assert code == 0 and runs is not None, err
    [run] = runs
    said = json.dumps(run)
    assert "it cannot go on (its env (OrderSupport) keeps its state" in said, said
    assert "goes on from its log" not in said
    code, pending, _ = cli("pending", "--json", "--db", str(db))
    [asked] = [p for p in pending if p.get("kind") == "write"]  # type: ignore[union-attr]
    for argv in (["approve", "r1", asked["call_id"]], ["reject", "r1", asked["call_id"]],
                 ["pause", "r1"]):  # fmt: skip
        code, _, err = cli(*argv, "--db", str(db))
        assert code == 2, (argv, err)
        assert "cannot go on" in err and "nothing will act on" in err, err


async def test_a_stopping_worker_ends_a_run_that_cannot_move_after_its_tools_not_hands_it_back(
    tmp_path: Any,
) -> None:
    """Handed back, the next worker crashed it as "its worker was lost": it is stopped after
    its current tools here, saying why (its pending write withdrawn with it)."""
    from conftest import SAMPLES

    from loopdeck.operator.launch import RunOptions
    from loopdeck.operator.placement import submit
    from loopdeck.store import leases

    db = tmp_path / "s.db"
    run_id = await submit(db, RunOptions(env=str(SAMPLES / "order_support"), script="solve",
                                         approve="wait"))  # fmt: skip
    store = await open_store(db)
    try:

        async def waiting() -> bool:
            row = await leases.placement(store, run_id)
            pinned = row is not None and row["unmovable"] is not None
            return pinned and bool(await queries.pending_approvals(store, run_id))

        worker = await with_a_worker(db, waiting)  # then stopped, as SIGTERM stops it
        row = await leases.placement(store, run_id)
        assert row is not None and row["state"] == "ended", row
        stop = (await stored(store, run_id))[-1]
        assert isinstance(stop, RunStopped) and stop.stop_reason.value == "cancelled"
        assert "its worker stopped, and it cannot move" in stop.detail
        assert "(OrderSupport) keeps its state in its worker's memory" in stop.detail
        assert "lost" not in stop.detail, stop.detail  # stopped on purpose, nothing lost
        assert await queries.pending_approvals(store, run_id) == []
        said = worker.said  # type: ignore[attr-defined]
        assert any(f"run {run_id}: cannot move" in line for line in said), said
    finally:
        await store.close()


async def test_commands_taken_for_a_run_no_longer_live_here_are_given_back(db: Location) -> None:
    """The worker reads its live runs' commands at once; a run that ended, was parked or
    handed back while the read was on its way takes none: they are untaken again, for its
    next worker or its end to say, never marked taken and dropped."""

    class GoneMeanwhile:  # live when the worker chose whom to read for, not when they came
        live = hears = True

        def __init__(self) -> None:
            self.offered: list[str] = []

        def take(self, command: dict[str, Any]) -> bool:
            self.offered.append(str(command["command"]))
            return False

    store = await open_store(db)
    try:
        await queries.send_command(store, "r1", "pause", "operator")
        worker = Worker(db, slots=1, say=lambda line: None)
        gone = GoneMeanwhile()
        worker.leased["r1"] = gone  # type: ignore[assignment]
        stop = asyncio.Event()
        reading = asyncio.create_task(worker._commands(store, stop))
        while not gone.offered and not reading.done():
            await asyncio.sleep(0.01)
        stop.set()
        await reading
        assert gone.offered[:1] == ["pause"]
        assert await _untaken(store, "r1") == ["pause"]
    finally:
        await store.close()


async def test_a_worker_says_when_the_store_answers_again(tmp_path: Any, monkeypatch: Any) -> None:
    """Through an outage it says once that it cannot claim, and once the store answers again
    that it claims again (it said nothing: the outage looked still on)."""
    from loopdeck.store import leases
    from loopdeck.store.base import StoreUnavailable

    said: list[str] = []
    tries: list[int] = []
    stop = asyncio.Event()

    async def claim(*args: Any, **kwargs: Any) -> None:
        tries.append(1)
        if len(tries) <= 2:
            raise StoreUnavailable("the server closed the connection", StoreUnavailable.UNREACHABLE)
        stop.set()

    monkeypatch.setattr(leases, "claim", claim)
    monkeypatch.setattr(Worker, "_wait", lambda self, store, stop: asyncio.sleep(0))
    worker = Worker(tmp_path / "s.db", slots=1, say=said.append)
    await worker._claiming(None, stop)  # type: ignore[arg-type]
    assert [line.split(": ", 1)[1] for line in said] == [
        "cannot claim for now: the server closed the connection",
        "the store answers again: claiming",
    ]
