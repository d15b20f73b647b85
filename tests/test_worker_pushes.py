"""`loopdeck worker --notify`: a worker pushes the decisions its runs wait on, as a run's own
process does. A run waiting on its operator stays on its worker until its push has gone, then
is parked (a parked run has no process to push it); taken up again from its log by a worker,
a decision pushed before the move is not pushed again; decided, it goes on to its end."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from notify_receivers import webhook
from worker_helpers import BOUND_S, lease_state, options, stored, with_a_worker

from loopdeck.cli import main
from loopdeck.core.approvals import ApprovalDecision
from loopdeck.core.events import DecisionsPushed, RunStopped
from loopdeck.operator.notify_config import NotifySettings
from loopdeck.operator.placement import submit
from loopdeck.store import deciding, leases, queries
from loopdeck.store.base import Store
from loopdeck.store.opening import open_store


async def _pushed(store: Store, run_id: str) -> list[str]:
    """The decisions the run's log says were pushed, in order."""
    return [d.call_id for e in await stored(store, run_id) if isinstance(e, DecisionsPushed)
            for d in e.decisions]  # fmt: skip


def _c3_asked() -> Any:
    """A write asked of run r1 now: its approval valid for an hour."""
    from datetime import UTC, datetime, timedelta

    from loopdeck.core.events import ApprovalRequested

    now = datetime.now(UTC)
    return ApprovalRequested(
        run_id="r1", call_id="c3", tool="add_note", args={}, args_sha256="0" * 64,
        state_hash="s" * 16, fingerprint="fp", plan_step=None, seq=1,
        requested_at=now, expires_at=now + timedelta(hours=1),
    )  # fmt: skip


async def _with_worker(db: Path, notify: NotifySettings, until: Any) -> None:
    await with_a_worker(db, until, slots=1, notify=notify)


async def test_a_workers_run_is_pushed_before_it_is_parked_and_once_across_a_move(
    tmp_path: Path, monkeypatch: Any
) -> None:
    monkeypatch.setenv("LOOPDECK_PARK_AFTER_S", "0.2")  # well before the push is due
    db = tmp_path / "s.db"
    run_id = await submit(db, options(tmp_path, approve="wait"))
    store = await open_store(db)
    try:
        with webhook() as (hook, hooked):
            notify = NotifySettings((hook,), after_s=1.0)

            async def parked(epoch: int) -> bool:
                row = await leases.placement(store, run_id)
                return row is not None and row["state"] == leases.PARKED and row["epoch"] == epoch

            await _with_worker(db, notify, lambda: parked(1))
            # Parked only once its push went: the log says so before the park.
            assert await _pushed(store, run_id) == ["c3"] and len(hooked) == 1

            # A message wakes it (its write still waits): another worker takes it up from its
            # log, knows c3 was pushed, and parks it again without a second push.
            await queries.send_command(store, run_id, "message", "op", "take your time")
            await _with_worker(db, notify, lambda: parked(2))
            assert await _pushed(store, run_id) == ["c3"] and len(hooked) == 1

            async def ended() -> bool:
                if await lease_state(store, run_id) == leases.PARKED:
                    for item in await queries.pending_approvals(store, run_id):
                        decision = ApprovalDecision(call_id=item["call_id"], approved=True,
                                                    by="operator")  # fmt: skip
                        await deciding.decide(store, run_id, decision)
                return await lease_state(store, run_id) == leases.ENDED

            await _with_worker(db, notify, ended)
            log = await stored(store, run_id)
            assert isinstance(log[-1], RunStopped) and log[-1].stop_reason.value == "goal_met"
            assert [e.seq for e in log] == list(range(1, len(log) + 1))
            pushed = await _pushed(store, run_id)
            assert pushed[0] == "c3" and pushed.count("c3") == 1, pushed  # c5 pushed as asked
            assert len(hooked) == len(pushed), hooked.items
    finally:
        await store.close()


def test_submit_refuses_notify_naming_the_worker_and_worker_refuses_a_bad_url(
    tmp_path: Path, capsys: Any
) -> None:
    db = tmp_path / "s.db"
    code = main(["submit", "order_support", "--notify", "json://localhost/x", "--db", str(db)])
    err = capsys.readouterr().err
    assert code == 2 and "loopdeck worker --notify" in err, err
    assert main(["submit", "order_support", "--db", str(db)]) == 0
    capsys.readouterr()
    code = main(["worker", "--db", str(db), "--notify", "nosuch://user:hunter22@host/tok"])
    err = capsys.readouterr().err
    assert code == 2 and "nosuch://" in err and "hunter22" not in err, err


async def test_a_push_owed_as_its_worker_stops_is_pushed_by_the_next_and_never_by_it(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """Its worker stops while the push is not due yet: the run is handed back, its notifier
    stopped there (nothing of it goes unrecorded later); the next worker reads no push in the
    log, pushes it, then parks the run."""
    from loopdeck.operator import notifications

    made: list[Any] = []
    watch_run = notifications.watch_run

    def watched(*args: Any) -> Any:
        made.append(watch_run(*args))
        return made[-1]

    monkeypatch.setattr(notifications, "watch_run", watched)
    monkeypatch.setenv("LOOPDECK_PARK_AFTER_S", "0.2")
    db = tmp_path / "s.db"
    run_id = await submit(db, options(tmp_path, approve="wait"))
    store = await open_store(db)
    try:
        with webhook() as (hook, hooked):

            async def asked() -> bool:
                return bool(await queries.pending_approvals(store, run_id))

            await _with_worker(db, NotifySettings((hook,), after_s=600.0), asked)
            assert await lease_state(store, run_id) == leases.QUEUED  # handed back
            assert [n.stopped for n in made] == [True] and len(hooked) == 0

            async def parked() -> bool:
                return await lease_state(store, run_id) == leases.PARKED

            await _with_worker(db, NotifySettings((hook,), after_s=0.5), parked)
            assert await _pushed(store, run_id) == ["c3"] and len(hooked) == 1
            assert all(n.stopped for n in made), made
    finally:
        await store.close()


async def test_a_push_that_cannot_be_made_is_recorded_failed_and_owed_no_more_than_its_tries(
    monkeypatch: Any,
) -> None:
    """Making the push raised (say, a server's secret file that cannot be read): said, recorded
    as a push no channel took, tried again as one; the run is not held by it for good."""
    from loopdeck.core.events import PushFailed
    from loopdeck.operator.notifications import Notifier
    from loopdeck.operator.push_channels import Channels

    def broken(self: Any, title: str, body: str) -> Any:
        raise ValueError("non-hexadecimal number found in fromhex() arg")

    monkeypatch.setattr(Channels, "send", broken)
    recorded: list[Any] = []
    settings = NotifySettings(("json://127.0.0.1:9/nobody",), after_s=0.05)
    notifier = Notifier(settings, Channels(settings.urls),
                        emit=lambda kind, **fields: recorded.append((kind, fields)))  # fmt: skip
    notifier.take(_c3_asked())
    assert notifier.owes()
    end = time.monotonic() + BOUND_S
    while not recorded:
        assert time.monotonic() < end, "no push was tried"
        await asyncio.sleep(0.02)
    [(kind, fields)] = recorded
    assert kind is PushFailed and "not made: ValueError" in fields["failed"][0], fields
    assert [d.call_id for d in fields["decisions"]] == ["c3"]
    assert notifier._in_flight == 0  # tried again later, as a push no channel took
    notifier.stop()
    assert not notifier.owes()


async def test_a_push_on_its_way_as_its_worker_stops_is_recorded_before_the_run_is_handed_back(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """The worker stops while its push is with the channel: the channel answers only once the
    hand-back has begun, and the run is handed back once the push is recorded, so the next
    worker never pushes it again."""
    import threading

    from loopdeck.operator.leased_run import LeasedRun
    from loopdeck.operator.push_channels import Channels, Delivery

    sending, release = threading.Event(), threading.Event()

    def slow(self: Any, title: str, body: str) -> Delivery:
        sending.set()
        release.wait(BOUND_S)
        return Delivery(took=("json",), failed=())

    let_go = LeasedRun.let_go

    async def letting_go(self: LeasedRun, *args: Any, **kwargs: Any) -> bool:
        release.set()  # the channel answers as the hand-back begins
        return await let_go(self, *args, **kwargs)

    monkeypatch.setattr(Channels, "send", slow)
    monkeypatch.setattr(LeasedRun, "let_go", letting_go)
    monkeypatch.setenv("LOOPDECK_PARK_AFTER_S", "600")  # held: handed back, never parked
    db = tmp_path / "s.db"
    run_id = await submit(db, options(tmp_path, approve="wait"))
    store = await open_store(db)
    try:

        async def push_on_its_way() -> bool:
            return sending.is_set()

        notify = NotifySettings(("json://127.0.0.1:9/x",), after_s=0.2)
        await _with_worker(db, notify, push_on_its_way)
        assert await lease_state(store, run_id) == leases.QUEUED  # handed back
        assert await _pushed(store, run_id) == ["c3"]
    finally:
        release.set()
        await store.close()


async def test_a_stop_ends_the_wait_for_a_push_on_its_way_and_nothing_is_recorded_after_it() -> (
    None
):
    import threading

    from loopdeck.operator.notifications import Notifier
    from loopdeck.operator.push_channels import Channels, Delivery

    release, recorded = threading.Event(), []

    class Held(Channels):
        def send(self, title: str, body: str) -> Delivery:
            release.wait(BOUND_S)
            return Delivery(took=("json",), failed=())

    settings = NotifySettings(("json://127.0.0.1:9/x",), after_s=0.01)
    notifier = Notifier(settings, Held(settings.urls),
                        emit=lambda kind, **fields: recorded.append(kind))  # fmt: skip
    notifier.take(_c3_asked())
    end = time.monotonic() + BOUND_S
    while notifier._in_flight == 0:
        assert time.monotonic() < end, "no push was handed to the sender"
        await asyncio.sleep(0.01)
    waiting = asyncio.create_task(notifier.recorded(BOUND_S))
    await asyncio.sleep(0)
    notifier.stop()  # the run stopped, or its lease was lost, as it waited
    assert await waiting is False
    release.set()
    while notifier._in_flight:
        assert time.monotonic() < end, "the push never came back"
        await asyncio.sleep(0.01)
    assert recorded == []


async def test_a_fork_pushes_nothing_of_its_sources_old_asks_as_it_is_rebuilt(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """A fork's rebuild hears its source's events stamped with their times; to a worker whose
    clock reads an hour ahead they are an hour old, yet none is due before `--notify-after`
    from now: the outcome its `RunForked` settles is never pushed."""
    from datetime import datetime, timedelta

    from test_fork_unknown_outcome import _ended, _source_lost_during_c3

    from loopdeck.core.events import RunForked
    from loopdeck.operator import notifications
    from loopdeck.operator.fork import fork

    class HourAhead(datetime):
        @classmethod
        def now(cls, tz: Any = None) -> Any:
            return datetime.now(tz) + timedelta(hours=1)

    db = tmp_path / "s.db"
    store = await open_store(db)
    try:
        await _source_lost_during_c3(store, db, tmp_path)
        forked = await fork(db, "src", "c5")
        monkeypatch.setattr(notifications, "datetime", HourAhead)
        with webhook() as (hook, hooked):
            await _with_worker(db, NotifySettings((hook,), after_s=600.0),
                               lambda: _ended(store, forked))  # fmt: skip
            log = await stored(store, forked)
            assert next(e for e in log if isinstance(e, RunForked)).settled == ["c3"]
            assert await _pushed(store, forked) == [] and len(hooked) == 0
    finally:
        await store.close()
