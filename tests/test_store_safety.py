"""The store tells the truth about a run: atomic creation, no store made by a typo, a live run
never called crashed, a reader's stop never displaces the runner's events (issue 8)."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import stat
import subprocess
import sys
import time

import pytest
from conftest import EDGES, prepare
from store_helpers import loopdeck

from loopdeck.core.approvals import ApprovalDecision
from loopdeck.core.states import StopReason
from loopdeck.store import queries
from loopdeck.store.base import SCHEMA_VERSION, StoreError
from loopdeck.store.liveness import process_started, runner_gone
from loopdeck.store.opening import open_store
from loopdeck.store.runner import RecordedRun
from loopdeck.store.writer import EventWriter

OPEN_ONE = """
import asyncio, sys
from pathlib import Path
from loopdeck.store.opening import open_store
async def main():
    store = await open_store(Path(sys.argv[1]))
    await store.close()
asyncio.run(main())
"""


def test_processes_racing_to_create_a_store_all_open_it(tmp_path) -> None:
    for attempt in range(3):
        db = tmp_path / f"race-{attempt}.db"
        racers = [
            subprocess.Popen([sys.executable, "-c", OPEN_ONE, str(db)], stderr=subprocess.PIPE)
            for _ in range(6)
        ]
        problems = [p.communicate(timeout=120)[1].decode() for p in racers]
        assert [p.returncode for p in racers] == [0] * 6, problems


async def test_a_store_is_created_whole(tmp_path) -> None:
    db = tmp_path / "new.db"
    store = await open_store(db)
    try:
        meta = dict(await store.fetchall("SELECT key, value FROM meta"))
    finally:
        await store.close()
    assert meta.pop("chain_since")  # when the store's hash chain began
    assert meta == {"app": "loopdeck", "schema_version": str(SCHEMA_VERSION)}
    assert stat.S_IMODE(db.stat().st_mode) == 0o600


@pytest.mark.parametrize("command", ["runs", "pending", "export", "cancel", "approve"])
def test_read_commands_never_create_a_store(tmp_path, cli, command) -> None:
    db = tmp_path / "typo.db"
    extra = {"export": ["r1"], "cancel": ["r1"], "approve": ["r1", "c1"]}.get(command, [])
    code, _, err = cli(command, *extra, "--db", str(db))
    assert code == 2 and "no such store" in err
    assert not db.exists()


def test_a_worker_refuses_a_store_nothing_was_submitted_to(tmp_path) -> None:
    """A mistyped `--db` holds no runs: the worker says so, never waits on an empty store."""
    db = tmp_path / "typo.db"
    done = loopdeck("worker", db=db, timeout=30)
    assert done.returncode == 2, done.stderr
    assert f"loopdeck: {db}: no such store (`loopdeck submit ENV_DIR --db {db}` creates" in (
        done.stderr
    )
    assert not db.exists()


def test_a_directory_is_not_a_store(tmp_path, cli) -> None:
    code, _, err = cli("runs", "--db", str(tmp_path))
    assert code == 2 and "is a directory" in err and "Traceback" not in err


async def test_a_read_only_store_is_refused_and_left_alone(tmp_path, cli) -> None:
    if os.geteuid() == 0:
        pytest.skip("root can write a read-only file; the check would not be seen")
    db = tmp_path / "ro.db"
    store = await open_store(db)
    await store.close()
    db.chmod(0o400)
    code, _, err = cli("runs", "--db", str(db))
    assert code == 2 and "read-only" in err
    assert stat.S_IMODE(db.stat().st_mode) == 0o400


def test_read_only_store_check_names_the_file(tmp_path, monkeypatch) -> None:
    db = tmp_path / "ro.db"
    db.write_bytes(b"")
    monkeypatch.setattr(os, "access", lambda path, mode: False)
    with pytest.raises(StoreError, match="read-only") as raised:
        asyncio.run(open_store(db))
    assert str(db) in str(raised.value)


def test_a_live_runner_on_this_host_is_never_crashed_by_a_stale_heartbeat() -> None:
    here = socket.gethostname()
    row = {
        "pid": os.getpid(),
        "host": here,
        "heartbeat_at": time.time() - 3600,
        "pid_started": process_started(os.getpid()),
    }
    assert runner_gone(row, here=here, now=time.time(), silence_s=30) is None
    gone = dict(row, pid_started="1")  # the pid now belongs to another process
    if row["pid_started"] is not None:
        assert "another process" in runner_gone(gone, here=here, now=time.time(), silence_s=30)
    other_host = dict(row, host="elsewhere")
    assert runner_gone(other_host, here=here, now=time.time(), silence_s=30)
    recent = dict(other_host, heartbeat_at=time.time() - 5)
    assert runner_gone(recent, here=here, now=time.time(), silence_s=30) is None


def test_a_dead_runner_on_this_host_is_crashed() -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    row = {"pid": dead.pid, "host": socket.gethostname(), "heartbeat_at": time.time()}
    row["pid_started"] = None
    assert "is gone" in runner_gone(row, here=socket.gethostname(), now=time.time(), silence_s=30)


async def test_a_reader_that_marks_a_live_run_crashed_is_corrected_by_the_runner(
    tmp_path,
) -> None:
    """A reader on 'another host' decides a waiting run is crashed; the runner is alive,
    gets its approval, and finishes: its events win, one run_stopped, no gap."""
    db = tmp_path / "s.db"
    store = await open_store(db)
    reader = await open_store(db)
    approved = asyncio.Event()

    class WaitsForTheTest:
        async def ask(self, request):
            await approved.wait()
            return ApprovalDecision(call_id=request.call_id, approved=True, by="test")

    prepared, _ = prepare(EDGES, "double-note", approver=WaitsForTheTest())
    writer = EventWriter(store)
    recorded = RecordedRun(store, prepared.runtime, writer)
    run_id = prepared.runtime.config.run_id
    task = asyncio.create_task(recorded.run())
    try:

        async def pending() -> bool:
            return bool(await queries.pending_approvals(reader))

        while not await pending():
            await asyncio.sleep(0.05)
        # As seen from another host after a long silence.
        await reader.execute(
            "UPDATE runs SET host = 'elsewhere', heartbeat_at = 0 WHERE run_id = ?", (run_id,)
        )
        assert await queries.mark_crashed_runners(reader, silence_s=30) == [run_id]
        assert (await queries.run_row(reader, run_id))["stop_reason"] == "crashed"
        assert not await queries.pending_approvals(reader)
        approved.set()
        outcome = await task
    finally:
        prepared.cleanup()
    rows = await reader.fetchall(
        "SELECT seq, kind, body FROM events WHERE run_id = ? ORDER BY seq", (run_id,)
    )
    row = await queries.run_row(reader, run_id)
    await reader.close()
    await store.close()
    seqs = [r["seq"] for r in rows]
    assert seqs == list(range(1, len(seqs) + 1)), "no gap, nothing displaced"
    kinds = [r["kind"] for r in rows]
    assert kinds.count("run_stopped") == 1 and kinds[-1] == "run_stopped"
    assert "run_corrected" in kinds
    stopped = json.loads(rows[-1]["body"])
    assert stopped["stop_reason"] == outcome.stop_reason.value != "crashed"
    assert row["stop_reason"] == outcome.stop_reason.value
    assert outcome.stop_reason is not StopReason.CRASHED


def test_a_store_from_before_the_upgrade_is_migrated(tmp_path) -> None:
    import sqlite3

    db = tmp_path / "v1.db"
    con = sqlite3.connect(db)
    con.executescript(
        """
        CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
        INSERT INTO meta VALUES ('app', 'loopdeck'), ('schema_version', '1');
        CREATE TABLE runs (run_id TEXT PRIMARY KEY, env TEXT, script TEXT, model TEXT,
            mode TEXT, goal TEXT, state TEXT, stop_reason TEXT, detail TEXT, started_at TEXT,
            ended_at TEXT, tokens INTEGER DEFAULT 0, cost_usd REAL,
            cost_unknown_calls INTEGER DEFAULT 0, pid INTEGER, host TEXT, heartbeat_at REAL,
            approve_mode TEXT);
        CREATE TABLE events (run_id TEXT NOT NULL, seq INTEGER NOT NULL, kind TEXT NOT NULL,
            at TEXT NOT NULL, body TEXT NOT NULL, PRIMARY KEY (run_id, seq));
        """
    )
    con.close()
    proc = loopdeck("runs", "--json", db=db)
    assert proc.returncode == 0, proc.stderr
    con = sqlite3.connect(db)
    version = con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0]
    columns = {r[1] for r in con.execute("PRAGMA table_info(events)")}
    con.close()
    assert version == str(SCHEMA_VERSION) and "origin" in columns


async def test_the_command_poller_ends_even_when_its_cancellation_is_swallowed(monkeypatch) -> None:
    """Python 3.11's wait_for can swallow a cancellation that lands as the awaited change
    arrives; the runner's command poller must still end, or its runner never exits."""
    import asyncio
    import contextlib

    from loopdeck.store import runner

    class SwallowingStore:
        async def wait_for_change(self, timeout_s: float) -> None:
            with contextlib.suppress(asyncio.CancelledError):  # what the race does: lost
                await asyncio.sleep(timeout_s)

    async def no_commands(store, runtime, run_id) -> None:
        return None

    class Runtime:
        class config:
            run_id = "r"

    monkeypatch.setattr(runner, "_apply_commands", no_commands)
    done = asyncio.Event()
    poller = asyncio.create_task(runner.serve_commands(SwallowingStore(), Runtime(), done, print))
    await asyncio.sleep(0.05)
    done.set()
    poller.cancel()
    await asyncio.wait_for(poller, 30)  # returns: the poller saw `done` after the lost cancel
