"""The event store: supervising a headless run from other processes, crashes, bad files."""

import asyncio
import json
import os
import signal
import sqlite3
import stat
import subprocess

import pytest
from conftest import HARNESS, SAMPLES
from store_helpers import last_json, listed_runs, loopdeck, start_runner, wait_for_pending

from loopdeck.store import queries
from loopdeck.store.base import SCHEMA_VERSION, Location, StoreError
from loopdeck.store.opening import open_store


@pytest.mark.slow  # seconds: `make stress` runs it (CI too)
async def test_waiting_run_is_released_by_approve_from_another_process(db) -> None:
    runner = start_runner(SAMPLES / "order_support", "solve", db, "--approve", "wait")
    try:
        pending = await wait_for_pending(db)
        assert pending["tool"] == "update_delivery_address"
        listed = last_json(loopdeck("pending", "--json", db=db).stdout)
        assert [p["call_id"] for p in listed] == [pending["call_id"]]
        assert {"run_id", "call_id", "tool", "args", "requested_at", "expires_at"} <= set(listed[0])
        approved = loopdeck("approve", pending["run_id"], pending["call_id"], "--json", db=db)
        assert approved.returncode == 0 and last_json(approved.stdout)["decided"] is True
        out, _ = runner.communicate(timeout=60)
    finally:
        runner.kill()
    assert runner.returncode == 0
    assert last_json(out)["stop_reason"] == "goal_met"
    runs = last_json(loopdeck("runs", "--json", db=db).stdout)
    assert runs[0]["stop_reason"] == "goal_met" and runs[0]["state"] == "complete"
    again = loopdeck("approve", pending["run_id"], pending["call_id"], db=db)
    assert again.returncode == 1 and "already decided" in again.stderr


@pytest.mark.slow
async def test_reject_with_reason_reaches_the_model(db) -> None:
    runner = start_runner(SAMPLES / "order_support", "solve", db, "--approve", "wait")
    try:
        pending = await wait_for_pending(db)
        loopdeck(
            "reject", pending["run_id"], pending["call_id"], "--reason", "call the customer", db=db
        )
        out, _ = runner.communicate(timeout=60)
    finally:
        runner.kill()
    summary = last_json(out)
    assert summary["stop_reason"] != "goal_met"
    exported = loopdeck("export", summary["run_id"], "--format", "jsonl", db=db).stdout
    events = [json.loads(line) for line in exported.splitlines()]
    assert all("kind" in e for e in events)
    finished = next(
        e for e in events if e["kind"] == "tool_finished" and e["call_id"] == pending["call_id"]
    )
    assert finished["status"] == "rejected"
    assert finished["result"]["error"]["message"] == "call the customer"
    decided = next(e for e in events if e["kind"] == "approval_decided")
    assert decided["by"].startswith("cli") and decided["approved"] is False


async def test_two_simultaneous_approvers_exactly_one_wins(db) -> None:
    runner = start_runner(SAMPLES / "order_support", "solve", db, "--approve", "wait")
    try:
        pending = await wait_for_pending(db)
        first, second = await open_store(db), await open_store(db)
        try:
            results = await asyncio.gather(
                queries.decide(first, pending["run_id"], pending["call_id"], approved=True, by="a"),
                queries.decide(
                    second, pending["run_id"], pending["call_id"], approved=False, by="b"
                ),
            )
        finally:
            await first.close()
            await second.close()
        out, _ = runner.communicate(timeout=60)
    finally:
        runner.kill()
    assert sorted(results) == [False, True]
    assert last_json(out)["stop_reason"] == ("goal_met" if results[0] else "stalled")


@pytest.mark.slow
async def test_cancel_and_kill_from_another_process(db) -> None:
    budgets = ("--max-tool-calls", "100000", "--max-turns", "100000", "--max-tokens", "1000000000")
    budgets += ("--max-cost", "100000", "--deadline", "120")
    for flag, reason in (((), "cancelled"), (("--now",), "killed")):
        runner = start_runner(HARNESS, "poll", db, *budgets)
        try:
            for _ in range(300):
                runs = listed_runs(db)
                live = [r for r in runs if r["state"] not in ("complete", "stopped")]
                if live:
                    break
                await asyncio.sleep(0.1)
            sent = loopdeck("cancel", live[0]["run_id"], *flag, db=db)
            assert sent.returncode == 0, f"cancel {flag} refused: {sent.stderr}"
            out = await _ended(runner, db, live[0]["run_id"])
        finally:
            runner.kill()
        summary = last_json(out)
        assert summary["stop_reason"] == reason
        assert "cli" in summary["detail"]


async def _ended(runner: subprocess.Popen[str], db: Location, run_id: str) -> str:
    """The runner's stdout once it ends; if it does not within 60 s, the failure says what
    the store holds (the command, whether it was taken, the run's last events) and what the
    runner printed, so a rare hang names its side."""
    try:
        out, _ = runner.communicate(timeout=60)
        return out
    except subprocess.TimeoutExpired:
        runner.kill()
        _, err = runner.communicate()
    store = await open_store(db)
    try:
        commands = await store.fetchall("SELECT * FROM commands WHERE run_id = ?", (run_id,))
        last = await store.fetchall(
            "SELECT seq, kind FROM events WHERE run_id = ? ORDER BY seq DESC LIMIT 8", (run_id,)
        )
    finally:
        await store.close()
    pytest.fail(
        f"run {run_id} did not end 60 s after the command; commands {[dict(c) for c in commands]};"
        f" last events {[tuple(e) for e in last]}; runner said: {err[-2000:]}"
    )


# Several seconds of subprocesses: in `make stress` (CI runs both targets).
@pytest.mark.slow
async def test_pause_and_resume_from_another_process(tmp_path) -> None:
    db = tmp_path / "s.db"
    budgets = ("--max-tool-calls", "100000", "--max-turns", "100000", "--max-tokens", "1000000000")
    runner = start_runner(
        HARNESS, "poll", db, *budgets, "--max-cost", "100000", "--deadline", "120"
    )
    try:
        run_id = None
        for _ in range(300):
            runs = last_json(loopdeck("runs", "--json", db=db).stdout) if db.exists() else []
            if runs:
                run_id = runs[0]["run_id"]
                break
            await asyncio.sleep(0.1)
        assert loopdeck("pause", run_id, db=db).returncode == 0
        await asyncio.sleep(1.0)
        store = await open_store(db)
        try:
            paused = await store.fetchall(
                "SELECT MAX(seq) AS seq FROM events WHERE kind = 'model_called'"
            )
            await asyncio.sleep(0.6)
            still = await store.fetchall(
                "SELECT MAX(seq) AS seq FROM events WHERE kind = 'model_called'"
            )
        finally:
            await store.close()
        assert paused[0]["seq"] == still[0]["seq"]  # no model call while paused
        assert loopdeck("resume", run_id, db=db).returncode == 0
        loopdeck("cancel", run_id, db=db)
        out, _ = runner.communicate(timeout=60)
    finally:
        runner.kill()
    events = [json.loads(line) for line in loopdeck("export", run_id, db=db).stdout.splitlines()]
    commands = [e["command"] for e in events if e["kind"] == "operator_command"]
    assert commands == ["pause", "resume", "cancel"]
    assert last_json(out)["stop_reason"] == "cancelled"


@pytest.mark.slow
async def test_kill_9_of_a_runner_is_crashed_and_nothing_acknowledged_is_lost(db) -> None:
    """SQLite: the runner's pid on this host is gone. PostgreSQL: the runner says it is on
    another host, so only its heartbeat's silence (2 s here) can tell."""
    other_host = isinstance(db, str)
    silence = {"LOOPDECK_CRASH_SILENCE_S": "2"} if other_host else None
    environ = {"LOOPDECK_HOST": "runner-elsewhere"} if other_host else None
    runner = start_runner(HARNESS, "slow-write", db, "--approve", "wait", environ=environ)
    try:
        pending = await wait_for_pending(db)
        loopdeck("approve", pending["run_id"], pending["call_id"], db=db)
        store = await open_store(db)
        try:
            for _ in range(100):  # the approval is durable before the write starts
                rows = await store.fetchall(
                    "SELECT kind FROM events WHERE kind = 'approval_decided'"
                )
                if rows:
                    break
                await asyncio.sleep(0.1)
        finally:
            await store.close()
        await asyncio.sleep(0.5)
        os.kill(runner.pid, signal.SIGKILL)
        runner.wait(timeout=10)
    finally:
        runner.kill()
    if other_host:  # only the heartbeat's silence can tell: wait for it
        for _ in range(300):
            runs = listed_runs(db, env=silence)
            if runs and runs[0]["stop_reason"] == "crashed":
                break
            await asyncio.sleep(0.1)
    runs = last_json(loopdeck("runs", "--json", db=db, env=silence).stdout)
    assert runs[0]["state"] == "stopped" and runs[0]["stop_reason"] == "crashed"
    assert runs[0]["outcome_unknown"] == [pending["call_id"]]
    if not other_host:
        with sqlite3.connect(db) as con:
            assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    store = await open_store(db)
    try:
        rows = await store.fetchall("SELECT seq, kind, origin FROM events ORDER BY seq")
    finally:
        await store.close()
    seqs, kinds = [r["seq"] for r in rows], [r["kind"] for r in rows]
    assert seqs == list(range(1, len(seqs) + 1))
    assert "approval_requested" in kinds and "approval_decided" in kinds
    assert kinds[-1] == "run_stopped"
    assert "tool_finished" not in kinds[kinds.index("approval_decided") :]


async def test_store_file_is_private_and_wal(tmp_path) -> None:
    db = tmp_path / "private.db"
    store = await open_store(db)
    try:
        mode = (await store.fetchall("PRAGMA journal_mode"))[0][0]
        version = await store.fetchall("SELECT value FROM meta WHERE key = 'schema_version'")
    finally:
        await store.close()
    assert stat.S_IMODE(db.stat().st_mode) == 0o600
    assert mode == "wal"
    assert int(version[0][0]) == SCHEMA_VERSION


async def test_newer_schema_is_refused_clearly(tmp_path) -> None:
    db = tmp_path / "newer.db"
    store = await open_store(db)
    await store.execute(
        "UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION + 1),)
    )
    await store.close()
    with pytest.raises(StoreError, match="newer than this loopdeck"):
        await open_store(db)
    result = loopdeck("runs", db=db)
    assert result.returncode == 2 and "newer than this loopdeck" in result.stderr


@pytest.mark.parametrize("kind", ["other-sqlite", "garbage"])
async def test_a_file_that_is_not_a_loopdeck_store_is_refused(tmp_path, kind) -> None:
    db = tmp_path / "other.db"
    if kind == "other-sqlite":
        with sqlite3.connect(db) as con:
            con.execute("CREATE TABLE customers (id INTEGER)")
    else:
        db.write_bytes(b"this is not a database at all" * 100)
    result = loopdeck("runs", db=db)
    assert result.returncode == 2
    assert "not a loopdeck database" in result.stderr
    assert str(db) in result.stderr


async def test_a_locked_store_is_named(tmp_path) -> None:
    db = tmp_path / "locked.db"
    await (await open_store(db)).close()
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        result = loopdeck("approve", "r", "c", db=db, timeout=30)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert result.returncode == 2
    assert "locked" in result.stderr and str(db) in result.stderr


async def test_unknown_run_is_named(tmp_path) -> None:
    db = tmp_path / "s.db"
    await (await open_store(db)).close()
    result = loopdeck("cancel", "nope", db=db)
    assert result.returncode == 2 and "no run 'nope'" in result.stderr


def test_every_event_of_a_run_is_recorded_in_order(tmp_path) -> None:
    import contextlib
    import io

    from loopdeck.cli import main

    def run(*argv: str) -> str:
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            main([*argv, "--db", str(tmp_path / "s.db")])
        return out.getvalue()

    for script in ("wrong-guess", "solve", "loop"):
        done = run("run", "service_outage", "--script", script, "--headless", "--json")
        run_id = last_json(done)["run_id"]
        exported = run("export", run_id).splitlines()
        events = [json.loads(line) for line in exported]
        assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
        assert events[0]["kind"] == "run_started" and events[-1]["kind"] == "run_stopped"


async def test_events_the_store_cannot_take_are_spilled_outside_its_folder(tmp_path) -> None:
    from loopdeck.core.events import OperatorCommand
    from loopdeck.store.writer import EventWriter

    db = tmp_path / "s.db"
    store = await open_store(db)
    writer = EventWriter(store)
    writer(OperatorCommand(run_id="r1", seq=1, command="pause", by="t"))
    holder = sqlite3.connect(db, isolation_level=None, timeout=0.1)
    holder.execute("BEGIN EXCLUSIVE")
    await store.execute("PRAGMA busy_timeout = 100")
    try:
        with pytest.raises(StoreError, match="locked"):
            await writer.flush()
        spilled = writer.spill()
    finally:
        holder.execute("ROLLBACK")
        holder.close()
        await store.close()
    assert spilled is not None and db.parent not in spilled.parents
    lines = spilled.read_text().splitlines()
    assert json.loads(lines[0])["store"] == str(db.resolve())  # the header names its store
    assert json.loads(lines[1])["command"] == "pause"
