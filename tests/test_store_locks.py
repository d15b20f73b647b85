"""A store's write lock held by another process (a `sqlite3` shell, a backup) is waited out by
every decision, the operator told; a decision for a run whose runner is gone is refused."""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from conftest import SAMPLES
from console_helpers import notices, wait_until
from store_helpers import last_json, start_runner, wait_for_pending

from loopdeck.core.approvals import ApprovalDecision
from loopdeck.store import deciding, queries
from loopdeck.store.base import Store, StoreUnavailable
from loopdeck.store.liveness import process_started, this_host
from loopdeck.store.opening import open_store

SIZE = (160, 48)
RUN, CALL = "run0locks001", "call-1"


def _yes(call_id: str, by: str) -> ApprovalDecision:
    return ApprovalDecision(call_id=call_id, approved=True, by=by)


def _no(call_id: str, by: str) -> ApprovalDecision:
    return ApprovalDecision(call_id=call_id, approved=False, by=by)


class HeldLock:
    """SQLite's write lock, taken by a connection of its own (`BEGIN IMMEDIATE`, as a
    `sqlite3` shell would) until `release`."""

    def __init__(self, db: Path) -> None:
        self.con = sqlite3.connect(db, isolation_level=None, timeout=30)
        self.con.execute("BEGIN IMMEDIATE")
        self.taken = time.monotonic()

    def release(self) -> None:
        if self.con.in_transaction:
            self.con.execute("ROLLBACK")

    def close(self) -> None:
        self.release()
        self.con.close()


async def _waiting_run(store: Store, pid: int) -> None:
    """A run waiting for the approval of CALL, its runner `pid` on this host."""
    now = datetime.now(UTC)
    await store.execute(
        "INSERT INTO runs (run_id, env, script, state, started_at, pid, host, pid_started,"
        " heartbeat_at) VALUES (?, 'env', 'script', 'awaiting_approval', ?, ?, ?, ?, ?)",
        (RUN, now.isoformat(), pid, this_host(), process_started(pid), time.time()),
    )
    await store.execute(
        "INSERT INTO approvals (run_id, call_id, tool, args, requested_at, expires_at, state)"
        " VALUES (?, ?, 'write_it', '{}', ?, ?, 'pending')",
        (RUN, CALL, now.isoformat(), (now + timedelta(minutes=5)).isoformat()),
    )


async def _stored(db: Path, pid: int) -> None:
    store = await open_store(db)
    try:
        await _waiting_run(store, pid)
    finally:
        await store.close()


def _dead_pid() -> int:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    return gone.pid


@pytest.fixture
def quick_busy(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each statement gives up on a held lock after 50 ms (5 s by default), so a lock held
    until the operator was told is short."""
    monkeypatch.setenv("LOOPDECK_BUSY_TIMEOUT_S", "0.05")


async def test_a_decision_waits_out_a_held_lock_and_lands_once(tmp_path, quick_busy) -> None:
    db = tmp_path / "s.db"
    store = await open_store(db)
    lock: HeldLock | None = None
    try:
        await _waiting_run(store, os.getpid())
        lock = HeldLock(db)
        told: list[str] = []

        def tell(message: str) -> None:
            told.append(message)
            assert lock is not None
            lock.release()  # the retry was told: the other process lets go

        won = await deciding.decide(store, RUN, _yes(CALL, "ops"), tell=tell)
        again = await deciding.decide(store, RUN, _no(CALL, "late"), tell=tell)
        state = await queries.approval_state(store, RUN, CALL)
    finally:
        if lock is not None:
            lock.close()
        await store.close()
    assert won and not again
    assert state is not None
    assert (state["state"], state["decided_by"], state["reason"]) == ("approved", "ops", "")
    assert len(told) == 2
    assert told[0].startswith("store locked by another process, retrying your approval of call-1")
    assert told[1].startswith("your approval of call-1 landed after")


async def test_an_answer_waits_out_a_held_lock(tmp_path, quick_busy) -> None:
    db = tmp_path / "s.db"
    store = await open_store(db)
    lock: HeldLock | None = None
    try:
        await _waiting_run(store, os.getpid())
        await store.execute(
            "INSERT INTO approvals (run_id, call_id, tool, args, requested_at, expires_at, state)"
            " VALUES (?, 'q-1', 'ask_user', ?, '2026-01-01', ?, 'pending')",
            (RUN, json.dumps({"question": "which address?"}), queries.QUESTION_NEVER_EXPIRES),
        )
        lock = HeldLock(db)
        told: list[str] = []

        def tell(message: str) -> None:
            told.append(message)
            assert lock is not None
            lock.release()

        won = await deciding.answer(store, RUN, "the new one", "ops", tell=tell)
        state = await queries.approval_state(store, RUN, "q-1")
    finally:
        if lock is not None:
            lock.close()
        await store.close()
    assert won and state is not None
    said = (state["state"], state["decided_by"], state["reason"])
    assert said == ("answered", "ops", "the new one")
    assert [t.split(",")[0] for t in told[:1]] == ["store locked by another process"]
    assert "retrying your answer to run run0locks001's question" in told[0]
    assert told[1].startswith("your answer to run run0locks001's question landed after")


async def test_a_lock_held_past_the_bound_is_named_and_the_request_stays_pending(
    tmp_path, quick_busy, monkeypatch
) -> None:
    # A long wait is said again: told every 50 ms over a second of retries, room for a loaded
    # machine's slow attempts (each waits its 50 ms busy timeout at least) to say it twice.
    monkeypatch.setattr(deciding, "TELL_EVERY_S", 0.05)
    db = tmp_path / "s.db"
    store = await open_store(db)
    lock = None
    try:
        await _waiting_run(store, os.getpid())
        lock = HeldLock(db)
        told: list[str] = []
        with pytest.raises(StoreUnavailable) as raised:
            await deciding.decide(store, RUN, _yes(CALL, "ops"), tell=told.append, retry_for_s=1.0)
        lock.release()
        state = await queries.approval_state(store, RUN, CALL)
    finally:
        if lock is not None:
            lock.close()
        await store.close()
    assert raised.value.cause == StoreUnavailable.LOCKED
    assert "locked by another process" in str(raised.value)
    assert "gave up on your approval of call-1" in str(raised.value)
    assert told[0].startswith("store locked by another process, retrying your approval")
    assert len(told) >= 2
    assert all(t.startswith("store locked by another process, still retrying") for t in told[1:])
    assert state is not None and state["state"] == "pending"


def test_cli_approve_waits_out_a_lock_and_says_so(tmp_path) -> None:
    db = tmp_path / "s.db"
    asyncio.run(_stored(db, os.getpid()))
    lock = HeldLock(db)
    try:
        approving = subprocess.Popen(
            [sys.executable, "-m", "loopdeck", "approve", RUN, CALL, "--json", "--db", str(db)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "LOOPDECK_BUSY_TIMEOUT_S": "0.1"},
        )
        assert approving.stderr is not None
        said = []  # the lock is let go once the wait was told
        while (line := approving.stderr.readline()) and "retrying" not in line:
            said.append(line)
        first = line
        lock.release()
        out, rest = approving.communicate(timeout=60)
    finally:
        lock.close()
        approving.kill()
    assert "store locked by another process, retrying your approval of call-1" in first, said
    assert "your approval of call-1 landed after" in rest
    assert approving.returncode == 0
    assert last_json(out)["decided"] is True and last_json(out)["state"] == "approved"


def test_a_decision_for_a_dead_runner_is_refused(tmp_path, cli) -> None:
    db = tmp_path / "s.db"
    asyncio.run(_stored(db, _dead_pid()))
    code, _, err = cli("approve", RUN, CALL, "--json", "--db", str(db))
    assert code == 2
    assert f"run {RUN}'s runner is gone" in err and "nothing will act on your approval of" in err
    code, runs, _ = cli("runs", "--json", "--db", str(db))
    assert code == 0 and runs is not None
    [run] = runs
    assert run["stop_reason"] == "crashed" and run["outcome_unknown"] == []
    code, pending, _ = cli("pending", "--json", "--db", str(db))
    assert pending == []  # withdrawn with the crash


async def _release_when(pilot: Any, app: Any, lock: HeldLock, held_s: float) -> float:
    """Once the operator was told of the retry (and the lock was held `held_s`), let go;
    returns how long the lock was held."""
    await wait_until(pilot, lambda: any("retrying your approval" in t for t in notices(app)))
    await wait_until(pilot, lambda: time.monotonic() - lock.taken >= held_s, timeout=held_s + 5)
    lock.release()
    return time.monotonic() - lock.taken


async def _notice(pilot: Any, app: Any, words: str) -> str:
    """The toast holding `words`, once the app has taken it: `notify` only posts a message,
    so a toast told in the same turn as the entry's drop is not held yet when the drop is seen."""
    await wait_until(pilot, lambda: any(words in t for t in notices(app)))
    return next(t for t in notices(app) if words in t)


# A console's connections give up on a held lock after 0.5 s: the lock is waited out by
# retrying soon, and the console's writer and its heartbeat's commits still wait each other out.
QUICK_BUSY_S = "0.5"
LOCKS = [
    pytest.param(0.0, id="released-once-told"),
    pytest.param(15.0, id="held-15s", marks=pytest.mark.slow),
]


@pytest.mark.slow  # seconds: `make stress` runs it (CI too)
@pytest.mark.parametrize("held_s", LOCKS)
async def test_inbox_approval_waits_out_a_lock(tmp_path, monkeypatch, held_s) -> None:
    from loopdeck.tui.app import ConsoleStart, LoopdeckApp
    from loopdeck.tui.fleet_screen import FleetScreen
    from loopdeck.tui.inbox import InboxScreen

    db = tmp_path / "s.db"
    runner = start_runner(SAMPLES / "order_support", "solve", db, "--approve", "wait")
    lock = None
    try:
        await wait_for_pending(db)  # the store is made: opening it races nobody from here
        if not held_s:  # this console's connections only; the runner keeps SQLite's 5 s
            monkeypatch.setenv("LOOPDECK_BUSY_TIMEOUT_S", QUICK_BUSY_S)
        app = LoopdeckApp(ConsoleStart.for_fleet(db))
        async with app.run_test(size=SIZE) as pilot:
            await wait_until(pilot, lambda: isinstance(app.screen, FleetScreen))
            await pilot.press("i")
            await wait_until(pilot, lambda: isinstance(app.screen, InboxScreen))
            inbox = app.screen
            await wait_until(pilot, lambda: len(inbox.entries) == 1, timeout=60)
            lock = HeldLock(db)
            await pilot.press("a")
            await wait_until(pilot, lambda: any("retrying" in t for t in notices(app)))
            table = inbox.query_one("#inbox-table")
            assert str(table.get_row_at(0)[0]) == "retrying…"  # the entry says so
            held = await _release_when(pilot, app, lock, held_s)
            await wait_until(pilot, lambda: not inbox.entries, timeout=30)
            landed = await _notice(pilot, app, "landed after")
        out, _ = runner.communicate(timeout=60)
    finally:
        if lock is not None:
            lock.close()
        runner.kill()
        runner.wait()
    assert held >= held_s and "your approval of" in landed
    summary = last_json(out)
    assert summary["stop_reason"] == "goal_met"
    writes = [c for c in summary["calls"] if c["tool"] == "update_delivery_address"]
    assert [c["status"] for c in writes] == ["executed"]  # the write ran once


@pytest.mark.parametrize("held_s", LOCKS)
async def test_the_runs_own_dialog_waits_out_a_lock(tmp_path, monkeypatch, held_s) -> None:
    from loopdeck.operator.launch import RunOptions
    from loopdeck.operator.session import RunSession
    from loopdeck.tui.app import ConsoleStart, LoopdeckApp
    from loopdeck.tui.dialogs import ApprovalDialog
    from loopdeck.tui.run_screen import RunScreen

    db = tmp_path / "s.db"
    if not held_s:
        monkeypatch.setenv("LOOPDECK_BUSY_TIMEOUT_S", QUICK_BUSY_S)
    session = RunSession(db, console=True)
    session.prepare(RunOptions(env=str(SAMPLES / "order_support"), script="solve"))
    app = LoopdeckApp(ConsoleStart.for_run(session))
    lock = None
    try:
        async with app.run_test(size=SIZE) as pilot:
            await wait_until(pilot, lambda: isinstance(app.screen, ApprovalDialog), timeout=60)
            screen = next(s for s in app.screen_stack if isinstance(s, RunScreen))
            lock = HeldLock(db)
            await pilot.press("a")
            held = await _release_when(pilot, app, lock, held_s)
            assert screen.running and screen.view.stop_reason is None  # waiting, not crashed
            await wait_until(pilot, lambda: screen.outcome is not None, timeout=60)
            landed = await _notice(pilot, app, "landed after")
    finally:
        if lock is not None:
            lock.close()
    assert held >= held_s and "your approval of" in landed
    assert screen.outcome.stop_reason.value == "goal_met"
    writes = [c for c in screen.outcome.calls if c.tool == "update_delivery_address"]
    assert [c.status.value for c in writes] == ["executed"]  # the write ran once
    store = await open_store(db)
    try:
        rows = await store.fetchall("SELECT state, decided_by FROM approvals")
        events = await store.fetchall("SELECT body FROM events WHERE kind = 'approval_decided'")
    finally:
        await store.close()
    assert [tuple(r) for r in rows] == [("approved", "console")]
    assert [json.loads(e["body"])["by"] for e in events] == ["console"]


async def test_an_inbox_worker_that_fails_is_said(tmp_path) -> None:
    from loopdeck.tui.app import ConsoleStart, LoopdeckApp
    from loopdeck.tui.fleet_screen import FleetScreen
    from loopdeck.tui.inbox import InboxScreen

    app = LoopdeckApp(ConsoleStart.for_fleet(tmp_path / "s.db"))
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, FleetScreen))
        # a store the inbox cannot open: its follower fails, and the operator hears of it
        app.push_screen(InboxScreen(tmp_path, lambda: datetime.now(UTC)))
        await wait_until(pilot, lambda: any("is a directory" in t for t in notices(app)))
        [said] = [t for t in notices(app) if "is a directory" in t]
        assert said.startswith("pending approvals failed: StoreError:")
