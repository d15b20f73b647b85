"""Which workers run for a store (schema v10, `store/presence.py`): a worker is listed running
while its heartbeat reaches the store (holding no run too), stopped once it stops in order,
silent once killed; `loopdeck workers` lists them, and a command to a run no worker holds says
what the workers mean for it: one with a free slot takes it up, every slot is taken, or none
runs (naming the last heard of) and nothing happens until one starts."""

from __future__ import annotations

import asyncio
import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from worker_helpers import BOUND_S

from loopdeck.cli import main
from loopdeck.operator import fleet as fleet_module
from loopdeck.operator.fleet import Fleet
from loopdeck.operator.worker import Worker
from loopdeck.store import leases, presence
from loopdeck.store.base import SCHEMA_VERSION, Location, Store
from loopdeck.store.opening import open_store

HOST_A = leases.WorkerName("host-a", 1, "aaaa")
HOST_B = leases.WorkerName("host-b", 2, "bbbb")


async def _until(check: Any, what: str) -> None:
    end = time.monotonic() + BOUND_S
    while not await check():
        assert time.monotonic() < end, f"never happened: {what}"
        await asyncio.sleep(0.05)


async def _parked(store: Store, run_id: str, worker: leases.WorkerName = HOST_A) -> None:
    """A submitted run claimed by `worker`, then let go as parked while paused: no worker
    claims it until a command is sent to it."""
    await leases.submit(store, run_id, {})
    claim = await leases.claim(store, worker, 60.0)
    assert claim is not None and claim.run_id == run_id
    await store.execute(
        "INSERT INTO runs (run_id, state, paused) VALUES (?, 'deciding', 1)", (run_id,)
    )
    await leases.let_go(store, run_id, claim.epoch, leases.PARKED, f"parked by {worker.host}")


async def _held(store: Store, run_id: str, worker: leases.WorkerName) -> None:
    """A run `worker` holds (the oldest claimable: claimed before a parked run sent a command)."""
    await leases.submit(store, run_id, {})
    await store.execute("UPDATE leases SET submitted_at = 0 WHERE run_id = ?", (run_id,))
    claim = await leases.claim(store, worker, 60.0)
    assert claim is not None and claim.run_id == run_id
    await store.execute("INSERT INTO runs (run_id, state) VALUES (?, 'thinking')", (run_id,))


def _cli(capsys: Any, *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    out: str = capsys.readouterr().out
    return code, " ".join(out.split())


async def test_a_worker_is_running_while_it_beats_and_stopped_once_it_stops(
    db: Location, monkeypatch: Any
) -> None:
    monkeypatch.setenv("LOOPDECK_LEASE_S", "0.4")  # a beat every 0.1 s
    store = await open_store(db)
    worker = Worker(db, slots=3, say=lambda line: None)
    stop = asyncio.Event()
    task = asyncio.create_task(worker.run(stop))
    try:

        async def beaten() -> bool:
            assert not task.done()
            seen = await presence.seen(store)
            return bool(seen) and seen[0].seen_at > seen[0].started_at  # a beat landed

        await _until(beaten, "the worker's row, beaten forward")
        [seen] = await presence.seen(store)
        assert seen.holder == worker.name.holder and seen.slots == 3 and seen.holds == 0
        assert seen.state(time.time()) == presence.RUNNING
        stop.set()
        await task
        [seen] = await presence.seen(store)
        assert seen.state(time.time()) == presence.STOPPED and seen.stopped_at is not None
    finally:
        stop.set()
        await task
        await store.close()


async def test_a_beat_under_way_as_its_worker_left_does_not_bring_it_back(db: Location) -> None:
    store = await open_store(db)
    try:
        await presence.arrive(store, HOST_A.holder, "host-a", 1, 2, 10.0)
        await presence.leave(store, HOST_A.holder)

        def beat() -> None:  # as the heartbeat's thread does, on a connection of its own
            beats = store.open_beats(1.0)
            try:
                at = time.time()
                itself = presence.beat_params(HOST_A.holder, "host-a", 1, 2, at, at, at + 10)
                beats.renew(HOST_A.holder, at + 10, at, itself)
            finally:
                beats.close()

        await asyncio.to_thread(beat)
        [seen] = await presence.seen(store)
        assert seen.state(time.time()) == presence.STOPPED
    finally:
        await store.close()


async def test_a_store_from_v9_gains_the_workers_table(db: Location) -> None:
    store = await open_store(db)
    try:
        await store.execute("DROP TABLE workers")
        await store.execute("UPDATE meta SET value = '9' WHERE key = 'schema_version'")
    finally:
        await store.close()
    store = await open_store(db)
    try:
        [version] = await store.fetchall("SELECT value FROM meta WHERE key = 'schema_version'")
        assert version[0] == str(SCHEMA_VERSION) == "10"
        await presence.arrive(store, HOST_A.holder, "host-a", 1, 2, 10.0)
        assert [w.holder for w in await presence.seen(store)] == [HOST_A.holder]
    finally:
        await store.close()


def test_workers_lists_none_then_each_worker_with_its_runs(tmp_path: Path, capsys: Any) -> None:
    db = tmp_path / "s.db"

    async def made(step: str) -> None:
        store = await open_store(db)
        try:
            if step == "workers":
                await presence.arrive(store, HOST_A.holder, "host-a", 1, 2, 600.0)
                await _held(store, "held1", HOST_A)
                await presence.arrive(store, HOST_B.holder, "host-b", 2, 4, 600.0)
                await presence.leave(store, HOST_B.holder)
        finally:
            await store.close()

    asyncio.run(made("store"))
    code, said = _cli(capsys, "workers", "--db", str(db))
    assert code == 0 and said == (
        f"no worker has run for {db} in the last day: `loopdeck worker --db {db}` starts one"
    )
    assert main(["workers", "--db", str(db), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == []

    asyncio.run(made("workers"))
    code, said = _cli(capsys, "workers", "--db", str(db))
    assert code == 0
    assert "host-a/1/aaaa running 1 of 2" in said and "host-b/2/bbbb stopped 0 of 4" in said, said
    assert main(["workers", "--db", str(db), "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [(w["worker"], w["state"], w["holds"], w["slots"]) for w in listed] == [
        ("host-a/1/aaaa", "running", 1, 2), ("host-b/2/bbbb", "stopped", 0, 4)
    ]  # fmt: skip


def test_a_command_to_a_parked_run_says_what_the_workers_mean_for_it(
    tmp_path: Path, capsys: Any
) -> None:
    """None has run: nothing happens until one starts. The one running has every slot taken:
    it waits for one to free. Another with a free slot: it takes it up, said as before."""
    db = tmp_path / "s.db"

    async def made(step: str) -> None:
        store = await open_store(db)
        try:
            if step == "parked":
                await _parked(store, "parked1")
            elif step == "busy":
                await presence.arrive(store, HOST_A.holder, "host-a", 1, 1, 600.0)
                await _held(store, "held1", HOST_A)
            else:
                await presence.arrive(store, HOST_B.holder, "host-b", 2, 2, 600.0)
        finally:
            await store.close()

    asyncio.run(made("parked"))
    code, said = _cli(capsys, "resume", "parked1", "--db", str(db))
    assert code == 0 and said.startswith(
        "parked1: resume sent; it is parked (no worker holds it): the next worker with a free"
        f" slot takes it up, and it goes on; no worker runs for {db}: nothing happens until one"
        f" starts (loopdeck worker --db {db})"
    ), said
    asyncio.run(made("busy"))
    code, said = _cli(capsys, "message", "parked1", "look again", "--db", str(db))
    assert code == 0 and said.endswith(
        f"the model hears it next turn; the one worker running for {db} has every slot taken"
        " (1 in all): it waits for one to free"
    ), said
    assert main(["message", "parked1", "and again", "--db", str(db), "--json"]) == 0
    sent = json.loads(capsys.readouterr().out)
    assert sent["held"] is False and sent["message"].endswith("it waits for one to free"), sent
    asyncio.run(made("free"))
    assert main(["cancel", "parked1", "--db", str(db), "--json"]) == 0
    sent = json.loads(capsys.readouterr().out)
    assert sent["held"] is False and sent["message"].endswith(
        "takes it up, and it stops after its current tools"
    ), sent


def test_a_worker_killed_is_silent_and_a_command_names_it_the_last_heard_of(
    tmp_path: Path, capsys: Any
) -> None:
    db = tmp_path / "s.db"
    asyncio.run(_with_store(db, lambda store: _parked(store, "parked1")))
    worker = subprocess.Popen(
        [sys.executable, "-m", "loopdeck", "worker", "--db", str(db), "--slots", "1"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "LOOPDECK_LEASE_S": "1", "LOOPDECK_HOST": "host-k"},
    )  # fmt: skip
    try:
        running = asyncio.run(_with_store(db, lambda store: _seen_as(store, presence.RUNNING)))
        assert running.host == "host-k" and running.pid == worker.pid
    finally:
        worker.send_signal(signal.SIGKILL)
        worker.wait()
        assert worker.stderr is not None
        worker.stderr.close()
    silent = asyncio.run(_with_store(db, lambda store: _seen_as(store, presence.SILENT)))
    code, said = _cli(capsys, "workers", "--db", str(db))
    assert code == 0 and f"{silent.holder} silent" in said, said
    code, said = _cli(capsys, "message", "parked1", "hello", "--db", str(db))
    assert code == 0
    assert f"; no worker runs for {db} (the last, {silent.holder}, silent since it was" in said
    assert f"nothing happens until one starts (loopdeck worker --db {db})" in said, said


async def _with_store(db: Path, use: Any) -> Any:
    store = await open_store(db)
    try:
        return await use(store)
    finally:
        await store.close()


async def _seen_as(store: Store, state: str) -> presence.SeenWorker:
    found: list[presence.SeenWorker] = []

    async def seen() -> bool:
        found[:] = [w for w in await presence.seen(store) if w.state(time.time()) == state]
        return bool(found)

    await _until(seen, f"a worker {state}")
    return found[0]


@pytest.fixture(autouse=True)
def _no_inherited_lease(monkeypatch: Any) -> None:
    monkeypatch.delenv("LOOPDECK_LEASE_S", raising=False)


async def test_the_fleet_says_which_workers_run(db: Location, monkeypatch: Any) -> None:
    """Nothing placed: nothing said. A run queued: no worker runs. A worker running: how many
    of its slots hold runs. Killed (its expiry passed, nothing committed): none runs again."""
    store, reading = await open_store(db), await open_store(db)  # the fleet's own connection
    fleet = Fleet()

    async def says(words: str) -> None:
        async def said() -> bool:
            fleet.workers_read = -math.inf  # read now, not after `READ_EVERY_S`
            await fleet.refresh(reading)
            return fleet.workers_said == words

        await _until(said, f"the fleet says {words!r}; it says {fleet.workers_said!r}")

    try:
        await says("")
        await leases.submit(store, "queued1", {})
        await says("no worker runs")  # once the fleet has read the queued run
        await presence.arrive(store, HOST_A.holder, "host-a", 1, 2, 600.0)
        await _held(store, "held1", HOST_A)
        await says("1 worker · 1 of 2 slots")
        await presence.arrive(store, HOST_B.holder, "host-b", 2, 4, 600.0)
        await says("2 workers · 1 of 6 slots")
        await presence.leave(store, HOST_B.holder)
        await says("1 worker · 1 of 2 slots")
        later = time.time() + 700  # host-a's expiry passed, nothing committed (killed)
        clock = SimpleNamespace(time=lambda: later, monotonic=time.monotonic)
        monkeypatch.setattr(fleet_module, "time", clock)
        await says("no worker runs")
    finally:
        await reading.close()
        await store.close()


def test_a_long_worker_name_folds_and_its_state_stays_at_60_columns(
    tmp_path: Path, capsys: Any, monkeypatch: Any
) -> None:
    db = tmp_path / "s.db"
    host = "ip-10-0-0-12.eu-west-1.compute.internal"

    async def made(store: Store) -> None:
        await presence.arrive(store, f"{host}/123456/abcdef12", host, 123456, 20, 600.0)

    asyncio.run(_with_store(db, made))
    monkeypatch.setenv("COLUMNS", "60")
    assert main(["workers", "--db", str(db)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert max(len(line) for line in lines) <= 60, lines
    shown = "".join(line.strip() for line in lines)
    assert "running" in shown and "0 of 20" in shown and "123456/abcdef12" in shown, lines


async def test_a_beat_makes_a_lost_row_again(db: Location) -> None:
    """A worker frozen past `KEPT_S` has its row deleted by the next to arrive; its next beat
    lists it again, from its own start."""
    store = await open_store(db)
    try:
        await presence.arrive(store, HOST_A.holder, "host-a", 1, 2, 10.0)
        await store.execute("DELETE FROM workers")

        def beat() -> None:
            beats = store.open_beats(1.0)
            try:
                at = time.time()
                itself = presence.beat_params(HOST_A.holder, "host-a", 1, 2, 100.0, at, at + 10)
                beats.renew(HOST_A.holder, at + 10, at, itself)
            finally:
                beats.close()

        await asyncio.to_thread(beat)
        [seen] = await presence.seen(store)
        assert seen.holder == HOST_A.holder and seen.started_at == 100.0
        assert seen.state(time.time()) == presence.RUNNING
    finally:
        await store.close()


async def test_a_worker_gone_a_day_is_not_read_and_the_last_heard_of_is_named(
    db: Location,
) -> None:
    store = await open_store(db)
    try:
        now = time.time()
        await presence.arrive(store, HOST_A.holder, "host-a", 1, 2, 10.0)
        await store.execute(
            "UPDATE workers SET seen_at = ?, expires_at = ?", (now - 2 * 86400,) * 2
        )
        assert await presence.seen(store) == []
        # host-a silent since 60 s ago (a long lease), host-b stopped 30 s ago: host-b is last
        await store.execute("UPDATE workers SET seen_at = ?, expires_at = ?", (now - 60, now - 1))
        await presence.arrive(store, HOST_B.holder, "host-b", 2, 2, 10.0)
        await store.execute(
            "UPDATE workers SET stopped_at = ?, expires_at = ? WHERE holder = ?",
            (now - 30, now - 30, HOST_B.holder),
        )
        seen = await presence.seen(store)
        assert [w.holder for w in seen if w.state(now) == presence.SILENT] == [HOST_A.holder]
        last = presence.last_gone(seen)
        assert last is not None and last.holder == HOST_B.holder
    finally:
        await store.close()


def test_a_worker_of_an_older_loopdeck_is_known_by_the_leases_it_holds(
    tmp_path: Path, capsys: Any
) -> None:
    """It keeps no row (it ran since before its store was brought to v10): it holds a live
    lease, so it runs, its slots unknown; a run no worker holds may be taken up by it."""
    db = tmp_path / "s.db"

    async def made(store: Store) -> None:
        await _parked(store, "parked1")
        await _held(store, "held1", HOST_A)  # no row of host-a's

    asyncio.run(_with_store(db, made))
    code, said = _cli(capsys, "workers", "--db", str(db))
    assert code == 0 and "host-a/1/aaaa running 1 of ?" in said, said
    code, said = _cli(capsys, "resume", "parked1", "--db", str(db))
    assert code == 0 and said.endswith("takes it up, and it goes on"), said

    async def fleet_said(store: Store) -> str:
        fleet = Fleet()
        await fleet.refresh(store)
        return fleet.workers_said

    assert asyncio.run(_with_store(db, fleet_said)) == "1 worker · 1 run"


async def test_the_fleet_reads_the_workers_every_few_seconds_not_every_refresh(
    tmp_path: Path, monkeypatch: Any
) -> None:
    db = tmp_path / "s.db"
    store, reading = await open_store(db), await open_store(db)
    reads: list[str] = []
    fetchall = reading.fetchall

    async def counted(sql: str, params: Any = ()) -> Any:
        if "FROM workers" in sql:
            reads.append(sql)
        return await fetchall(sql, params)

    monkeypatch.setattr(reading, "fetchall", counted)
    fleet = Fleet()
    try:
        for i in range(5):  # a commit before each refresh: the counter moves every time
            await leases.submit(store, f"q{i}", {})
            await fleet.refresh(reading)
        assert len(reads) == 1 and fleet.workers_said == "no worker runs", reads
        fleet.workers_read -= presence.READ_EVERY_S  # as if that long had passed
        await fleet.refresh(reading)
        assert len(reads) == 2, reads
    finally:
        await reading.close()
        await store.close()


async def test_a_stopping_worker_is_stopped_before_it_hands_its_runs_back(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """It claims no more once stopping: no command is told it takes a run up while it hands
    its own back (up to `HAND_BACK_WAIT_S`)."""
    db = tmp_path / "s.db"
    store = await open_store(db)
    states: list[str] = []
    hand_back = Worker._hand_back

    async def looked(self: Worker, at: Store) -> None:
        states.extend(w.state(time.time()) for w in await presence.seen(at))
        await hand_back(self, at)

    monkeypatch.setattr(Worker, "_hand_back", looked)
    worker = Worker(db, slots=1, say=lambda line: None)
    stop = asyncio.Event()
    task = asyncio.create_task(worker.run(stop))
    try:
        await _until(lambda: _has_rows(store), "the worker listed")
        stop.set()
        await task
        assert states == [presence.STOPPED], states
    finally:
        stop.set()
        await task
        await store.close()


async def _has_rows(store: Store) -> bool:
    return bool(await presence.seen(store))


def test_submit_and_fork_say_when_no_worker_will_take_the_run_up(
    cli: Any, solved_run: tuple[Path, str]
) -> None:
    db, run_id = solved_run
    code, done, err = cli("submit", "order_support", "--json", "--db", str(db))
    assert code == 0 and done is not None, err
    said = " ".join(err.split())
    assert f"run {done['run_id']} is queued; no worker runs for {db}: nothing happens until" in said
    code, done, err = cli("fork", run_id, "--at", "c3", "--db", str(db), "--json")
    assert code == 0 and done is not None, err
    assert f"run {done['run_id']} is queued; no worker runs for {db}" in " ".join(err.split())

    async def running(store: Store) -> None:
        await presence.arrive(store, HOST_A.holder, "host-a", 1, 4, 600.0)

    asyncio.run(_with_store(db, running))
    code, done, err = cli("submit", "order_support", "--json", "--db", str(db))
    assert code == 0 and done is not None and "is queued" not in err, err
