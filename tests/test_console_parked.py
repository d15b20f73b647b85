"""A run its worker parked (it waits on its operator, no worker holds it), opened in the
console: the header says it parked as `loopdeck runs` does ("parked (paused)"), and what has a
free worker take it up again; nothing turns, no host is named. Once a worker holds it again,
the header is a live run's. It read "⠼ paused · … · waiting on you", its spinner turning."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from console_helpers import run_screen, wait_until
from test_decision_refusals import Recorded, record
from test_parking_paused import PausedWhileItRuns, _slow
from worker_helpers import lease_state, with_a_worker

from loopdeck.core.events import StateChanged
from loopdeck.core.replay_events import RunMoved
from loopdeck.core.states import RunState
from loopdeck.operator import store_link
from loopdeck.operator.placement import submit
from loopdeck.operator.store_link import StoreLink
from loopdeck.operator.worker import Worker
from loopdeck.store import deciding, leases, presence, queries
from loopdeck.store.opening import open_store
from loopdeck.tui.app import ConsoleStart, LoopdeckApp
from loopdeck.tui.panels import SPINNER, RunHeader

SIZE = (160, 48)


def _header(app: LoopdeckApp) -> str:
    screen = run_screen(app)
    return "" if screen is None else str(screen.query_one(RunHeader).render())


def _turning(header: str) -> bool:
    return header[:1] in SPINNER


async def _still_after_frames(pilot: Any, app: LoopdeckApp, frames: int = 3) -> None:
    """The header, drawn again on `frames` spinner steps, never turns."""
    screen = run_screen(app)
    assert screen is not None
    until = screen.panels.frame + frames
    while screen.panels.frame < until:
        assert not _turning(_header(app)), _header(app)
        await pilot.pause(0.05)
    assert not _turning(_header(app)), _header(app)


async def test_a_parked_runs_header_says_so_until_a_worker_takes_it_up(tmp_path: Path) -> None:
    """Parked on its write's approval by host-a: `parked (awaiting_approval)`, taken up once
    the operator decides; claimed by host-b (a command woke it), the header is live again."""
    db = tmp_path / "s.db"
    store = await open_store(db)
    try:
        await leases.submit(store, "r1", {})
        claim = await leases.claim(store, leases.WorkerName("host-a", 1, "aaaa"), 60.0)
        assert claim is not None
        run = Recorded("r1").started(RunState.PLANNING)
        run.add(RunMoved, host="host-a", was=None, epoch=1, note="started on host-a", after_seq=2)
        run.add(StateChanged, source=RunState.PLANNING, target=RunState.AWAITING_APPROVAL)
        await record(store, run.write("c1"))
        note = "parked by host-a: waits for c1's approval"
        assert await leases.let_go(store, "r1", claim.epoch, leases.PARKED, note)
        app = LoopdeckApp(ConsoleStart.for_link(StoreLink(db, "r1")))
        async with app.run_test(size=SIZE) as pilot:
            await wait_until(pilot, lambda: "parked (awaiting_approval)" in _header(app))
            header = _header(app)  # no worker ever ran for the store
            assert "no worker runs: one started takes it up once you decide" in header, header
            await presence.arrive(store, "host-a/1/aaaa", "host-a", 1, 4, 600.0)
            await wait_until(pilot, lambda: "a free worker takes" in _header(app))
            header = _header(app)
            assert "a free worker takes it up once you decide" in header, header
            assert "no worker runs" not in header, header
            assert "1 approval waiting" in header and "host-a" not in header, header
            await _still_after_frames(pilot, app)
            await queries.send_command(store, "r1", "message", "op", "go on")
            taken = await leases.claim(store, leases.WorkerName("host-b", 2, "bbbb"), 60.0)
            assert taken is not None and taken.run_id == "r1"
            await wait_until(pilot, lambda: _turning(_header(app)))
            header = _header(app)
            assert "parked" not in header and " awaiting_approval " in header, header
            assert "takes it up" not in header, header
    finally:
        await store.close()


@pytest.mark.slow  # a worker runs the run, parks it, and runs it again once resumed
async def test_a_run_parked_while_paused_says_so_and_goes_on_once_resumed(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """A real worker parks the paused run (`loopdeck runs`: `parked (paused)`); the console
    says so, without a spinner; resumed and taken up by a worker, it runs to its end."""
    monkeypatch.setenv("LOOPDECK_PARK_AFTER_S", "0.3")
    db = tmp_path / "s.db"
    run_id = await submit(db, _slow(tmp_path))
    store = await open_store(db)
    try:
        paused = PausedWhileItRuns(store, run_id)
        await with_a_worker(db, paused.parked_now)
        app = LoopdeckApp(ConsoleStart.for_link(StoreLink(db, run_id)))
        async with app.run_test(size=SIZE) as pilot:
            await wait_until(pilot, lambda: "parked (paused)" in _header(app))
            header = _header(app)  # the worker that parked it stopped: none runs
            assert "no worker runs: one started takes it up on resume" in header, header
            await _still_after_frames(pilot, app)
            assert await deciding.pause_or_resume(store, run_id, "resume", "op") is None
            worker = Worker(db, slots=1, say=lambda _: None)
            stop = asyncio.Event()
            task = asyncio.create_task(worker.run(stop))
            try:
                screen = run_screen(app)
                assert screen is not None
                await wait_until(pilot, lambda: screen.view.stop_reason == "goal_met", 120.0)
                # Its last move is named ("… (parked by vm)"), no longer a park.
                await wait_until(pilot, lambda: "goal_met" in _header(app))
                header = _header(app)
                assert "parked (" not in header and "takes it up" not in header, header
                assert await lease_state(store, run_id) == leases.ENDED
            finally:
                stop.set()
                await task
    finally:
        await store.close()


async def test_the_parked_header_reads_the_lease_only_once_the_store_changed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run screen reads the store every poll (0.1 s on SQLite): its lease is read again
    only once another connection committed, and only its state and note (not its options,
    the policies' text). Parked, which workers run is read with it, and again once
    `WORKERS_READ_S` has passed (a worker killed commits nothing)."""
    db = tmp_path / "s.db"
    store = await open_store(db)
    link = StoreLink(db, "r1")
    link.store = await open_store(db, create=False)
    reads: list[str] = []
    workers: list[str] = []
    fetchall = link.store.fetchall

    async def counted(sql: str, params: Any = ()) -> Any:
        if "FROM workers" in sql:
            workers.append(sql)
        elif "FROM leases" in sql:
            reads.append(sql)
        return await fetchall(sql, params)

    monkeypatch.setattr(link.store, "fetchall", counted)
    try:
        await leases.submit(store, "r1", {})
        for _ in range(3):
            await link._refresh_parked()
        assert len(reads) == 1 and link.parked == "", reads
        assert "options" not in reads[0], reads
        claim = await leases.claim(store, leases.WorkerName("host-a", 1, "aaaa"), 60.0)
        assert claim is not None
        note = "parked by host-a: waits for c1's approval"
        assert await leases.let_go(store, "r1", claim.epoch, leases.PARKED, note)
        await link._refresh_parked()
        assert link.parked == note and len(reads) == 2, reads
        assert len(workers) == 1 and link.workerless, workers
        await link._refresh_parked()
        assert len(reads) == 2 and len(workers) == 1, (reads, workers)
        monkeypatch.setattr(store_link, "WORKERS_READ_S", 0.0)
        await presence.arrive(store, "host-a/1/aaaa", "host-a", 1, 4, 600.0)
        await link._refresh_parked()
        assert len(workers) == 2 and not link.workerless, workers
        # Its lease's time passes with nothing committed (killed): read again all the same.
        later = time.time() + 700
        monkeypatch.setattr(
            store_link, "time", SimpleNamespace(time=lambda: later, monotonic=time.monotonic)
        )
        await link._refresh_parked()
        assert len(reads) == 3 and len(workers) == 3 and link.workerless, (reads, workers)
    finally:
        await link.store.close()
        await store.close()
