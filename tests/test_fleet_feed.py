"""The fleet's change feed (issue 30): each run's summary kept on its row by its writer, once
per batch, and a change number, so a fleet reads the runs that changed, never all of them;
whatever another process changes (a decision, an answer, a crash mark) shows at the next
read; a v3 store is brought forward with its old runs summarized. Both engines."""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest
from conftest import fresh_pg_database

from loopdeck.core.approvals import ApprovalDecision
from loopdeck.core.events import (
    ApprovalRequested,
    BudgetUpdated,
    CallProposed,
    CallStatus,
    EventBase,
    EventBus,
    GuardTripped,
    OperatorCommand,
    QuestionAsked,
    ReviewVerdict,
    RunStarted,
    StateChanged,
    ToolFinished,
)
from loopdeck.core.states import RunState
from loopdeck.operator.fleet import Fleet
from loopdeck.store import deciding, queries
from loopdeck.store.base import SCHEMA_VERSION, Location, Store
from loopdeck.store.event_rows import RunRows, event_row
from loopdeck.store.opening import open_store
from loopdeck.store.writer import EventWriter


@pytest.fixture(params=["sqlite", "postgresql"])
def location(request: pytest.FixtureRequest, tmp_path: Any, monkeypatch: Any) -> Location:
    if request.param == "sqlite":
        return tmp_path / "s.db"
    return fresh_pg_database(monkeypatch)


class Recorded:
    """One run recorded through the real writer, as its runner records it."""

    def __init__(self, store: Store, run_id: str) -> None:
        self.run_id = run_id
        self.bus = EventBus()
        self.writer = EventWriter(store)
        self.bus.subscribe(self.writer)
        self.emit(RunStarted, env="e", script="s", model="m", mode="rounds", goal="g", budget={})

    def emit(self, cls: Any, **fields: Any) -> EventBase:
        made: EventBase = self.bus.emit(cls, run_id=self.run_id, **fields)
        return made

    async def flush(self) -> None:
        await self.writer.flush()


async def refreshed_until(fleet: Fleet, store: Store, condition: Any) -> None:
    """Refresh as the fleet's follower does (woken by the store) until `condition()`."""
    end = time.monotonic() + 30
    await fleet.refresh(store)
    while not condition():
        assert time.monotonic() < end, "the fleet never showed it"
        await store.wait_for_change(0.05)
        await fleet.refresh(store)


async def test_the_fleet_reads_only_the_runs_that_changed(location: Location) -> None:
    writing, reading = await open_store(location), await open_store(location)
    try:
        async with writing.transaction() as tx:
            for i in range(200):
                await tx.execute(
                    "INSERT INTO runs (run_id, env, script, model, state, started_at)"
                    " VALUES (?, 'e', 's', 'm', 'deciding', '2026-01-01T00:00:00+00:00')",
                    (f"run{i:03d}",),
                )
        fleet = Fleet()
        await fleet.refresh(reading)
        assert len(fleet.rows) == 200 and fleet.last_read == 200
        run = Recorded(writing, "run007")
        run.emit(BudgetUpdated, usage={"tokens": (500.0, 1000.0)}, cost_unknown_calls=1)
        await run.flush()
        await refreshed_until(fleet, reading, lambda: fleet.rows["run007"].closest)
        # SQLite exactly the one; PostgreSQL also any row of a transaction that was still
        # open at the last read (none here but the server's own, if any).
        assert 1 <= fleet.last_read <= (1 if writing.backend == "sqlite" else 10)
        assert fleet.rows["run007"].closest == "tokens 50%"
        assert fleet.rows["run007"].seen_seq == 2
        assert not await fleet.refresh(reading)  # nothing new: nothing read
    finally:
        await writing.close()
        await reading.close()


async def test_the_writer_keeps_the_summary_the_fleet_shows(location: Location) -> None:
    store, reading = await open_store(location), await open_store(location)
    try:
        run = Recorded(store, "r1")
        run.emit(StateChanged, source=RunState.READY, target=RunState.DECIDING)
        run.emit(BudgetUpdated, usage={"tokens": (10.0, 100.0), "turns": (9.0, 10.0)},
                 cost_unknown_calls=1)  # fmt: skip
        run.emit(ReviewVerdict, round=1, verdict="fail", reasons=["order 7 not refunded"],
                 before_hash="a", after_hash="b")  # fmt: skip
        for _ in range(2):
            run.emit(GuardTripped, call_id="c1", tool="poll", fingerprint="f")
        run.emit(OperatorCommand, command="pause", by="op")
        await run.flush()
        fleet = Fleet()
        await fleet.refresh(reading)
        row = fleet.rows["r1"]
        assert (row.state, row.closest, row.last_finding) == ("deciding", "turns 90%",
                                                              "order 7 not refunded")  # fmt: skip
        assert row.repeats == 2 and row.paused and row.needs_operator == "paused"
        assert row.seen_seq == 7
        run.emit(OperatorCommand, command="resume", by="op")
        run.emit(GuardTripped, call_id="c2", tool="poll", fingerprint="g")
        await run.flush()
        await refreshed_until(fleet, reading, lambda: not fleet.rows["r1"].paused)
        assert fleet.rows["r1"].repeats == 3 and fleet.rows["r1"].seen_seq == 9
    finally:
        await store.close()
        await reading.close()


async def test_a_decision_or_an_answer_by_another_connection_shows(location: Location) -> None:
    runner, reading, deciding_store = [await open_store(location) for _ in range(3)]
    try:
        run = Recorded(runner, "r1")
        run.emit(CallProposed, call_id="c1", round=1, tool="refund", args={}, risk="write",
                 fingerprint="f", state_hash="h")  # fmt: skip
        request = run.emit(ApprovalRequested, call_id="c1", tool="refund", args={},
                           args_sha256="0" * 64, state_hash="h", fingerprint="f",
                           plan_step=None, requested_at="2026-01-01T00:00:00+00:00",
                           expires_at="2999-01-01T00:00:00+00:00")  # fmt: skip
        run.emit(QuestionAsked, question_id="q1", question="which order?")
        before = datetime.now(UTC)
        await run.flush()
        after = datetime.now(UTC)
        fleet = Fleet()
        await fleet.refresh(reading)
        row = fleet.rows["r1"]
        assert row.pending == 2 and row.needs_operator == "approval"
        if runner.backend == "postgresql":  # the asking's length from when the store wrote it,
            # on the server's clock (`store/asking_clock.py`; this host's, here)
            length = request.expires_at - request.requested_at  # type: ignore[attr-defined]
            assert before + length <= row.soonest_expiry <= after + length
        else:
            assert row.soonest_expiry == request.expires_at  # type: ignore[attr-defined]
        decision = ApprovalDecision(call_id="c1", approved=True, by="other")
        assert await deciding.decide(deciding_store, "r1", decision)
        await refreshed_until(fleet, reading, lambda: fleet.rows["r1"].pending == 1)
        assert await deciding.answer(deciding_store, "r1", "order 7", "other")
        await refreshed_until(fleet, reading, lambda: fleet.rows["r1"].pending == 0)
        assert fleet.rows["r1"].soonest_expiry is None and not fleet.rows["r1"].needs_operator
    finally:
        for store in (runner, reading, deciding_store):
            await store.close()


async def test_a_run_marked_crashed_by_another_reader_shows(location: Location) -> None:
    runner, reading, marking = [await open_store(location) for _ in range(3)]
    try:
        run = Recorded(runner, "r1")
        run.emit(StateChanged, source=RunState.READY, target=RunState.DECIDING)
        await run.flush()
        fleet = Fleet()
        await fleet.refresh(reading)
        assert fleet.rows["r1"].live and fleet.rows["r1"].seen_seq == 2
        assert await queries.mark_crashed(marking, "r1", "runner pid 1 on elsewhere is gone")
        await refreshed_until(fleet, reading, lambda: not fleet.rows["r1"].live)
        assert fleet.rows["r1"].stop_reason == "crashed" and fleet.rows["r1"].seen_seq == 3
    finally:
        for store in (runner, reading, marking):
            await store.close()


class CountingTx:
    """A transaction that only counts what it is asked to do."""

    def __init__(self) -> None:
        self.statements: list[str] = []

    async def execute(self, sql: str, params: Sequence[Any] = ()) -> int:
        self.statements.append(sql)
        return 1

    async def executemany(self, sql: str, rows: list[tuple[Any, ...]]) -> None:
        self.statements.append(sql)

    async def fetchall(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        self.statements.append(sql)
        return []

    async def append(self, table: str, columns: Sequence[str], rows: list[tuple[Any, ...]]) -> None:
        self.statements.append(f"append {table}")


async def test_a_batch_updates_its_run_row_once() -> None:
    class Runner:
        pid, pid_started, host, approve_mode = 1, None, "h", ""

    events: list[EventBase] = []
    for n in range(20):
        events += [
            StateChanged(run_id="r", seq=5 * n + 1, source=RunState.DECIDING,
                         target=RunState.EXECUTING),
            ToolFinished(run_id="r", seq=5 * n + 2, call_id=f"c{n}", tool="poll",
                         status=CallStatus.EXECUTED, result={}, duration_ms=1.0),
            StateChanged(run_id="r", seq=5 * n + 3, source=RunState.EXECUTING,
                         target=RunState.DECIDING),
            BudgetUpdated(run_id="r", seq=5 * n + 4, usage={"tokens": (n, 100.0),
                          "cost_usd": (0.0, 1.0)}, cost_unknown_calls=0),
            GuardTripped(run_id="r", seq=5 * n + 5, call_id=f"c{n}", tool="poll", fingerprint="f"),
        ]  # fmt: skip
    tx = CountingTx()
    await RunRows(Runner()).apply_batch(tx, events)  # type: ignore[arg-type]
    assert len(tx.statements) == 1 and tx.statements[0].startswith("UPDATE runs SET")
    assert "guard_repeats = guard_repeats + 20" in tx.statements[0]


async def test_a_large_batch_and_a_small_one_read_back_as_written(location: Location) -> None:
    """PostgreSQL appends a large batch by COPY and a small one by one INSERT."""
    store = await open_store(location)
    try:
        run = Recorded(store, "r1")
        sent = [
            run.emit(
                ToolFinished,
                call_id=f"c{n}",
                tool="poll",
                status=CallStatus.EXECUTED,
                result={"text": f'line {n}\t\\ "quoted" \u00e9'},
                duration_ms=0.5,
            )
            for n in range(300)
        ]
        await run.flush()
        run.emit(StateChanged, source=RunState.READY, target=RunState.DECIDING)
        await run.flush()
        rows = await queries.events_after(store, "r1", 0, limit=1000)
        assert [row["seq"] for row in rows] == list(range(1, 303))
        assert [row["body"] for row in rows[1:301]] == [event_row(e)[4] for e in sent]
        assert (await queries.run_row(store, "r1") or {})["last_seq"] == 302
    finally:
        await store.close()


V3_TABLES = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
INSERT INTO meta VALUES ('app', 'loopdeck'), ('schema_version', '3');
CREATE TABLE runs (run_id TEXT PRIMARY KEY, env TEXT, script TEXT, model TEXT, mode TEXT,
    goal TEXT, state TEXT, stop_reason TEXT, detail TEXT, started_at TEXT, ended_at TEXT,
    tokens BIGINT DEFAULT 0, cost_usd DOUBLE PRECISION, cost_unknown_calls BIGINT DEFAULT 0,
    pid BIGINT, host TEXT, heartbeat_at DOUBLE PRECISION, approve_mode TEXT, pid_started TEXT);
CREATE TABLE events (run_id TEXT NOT NULL, seq INTEGER NOT NULL, kind TEXT NOT NULL,
    at TEXT NOT NULL, body TEXT NOT NULL, origin TEXT, PRIMARY KEY (run_id, seq));
CREATE TABLE approvals (run_id TEXT NOT NULL, call_id TEXT NOT NULL, tool TEXT, args TEXT,
    requested_at TEXT, expires_at TEXT, state TEXT NOT NULL, decided_by TEXT, reason TEXT,
    decided_at TEXT, outcome TEXT, edited_args TEXT, grant_rule TEXT,
    PRIMARY KEY (run_id, call_id));
CREATE TABLE commands (id INTEGER PRIMARY KEY, run_id TEXT NOT NULL, command TEXT NOT NULL,
    "by" TEXT NOT NULL, created_at DOUBLE PRECISION NOT NULL, consumed_at DOUBLE PRECISION);
"""


def _v3_store(location: Location) -> None:
    """A store as loopdeck 3 left it: one live run with a budget, a finding, two repeats, a
    pause and a pending approval; one ended run."""
    events = [
        BudgetUpdated(run_id="old", seq=1, usage={"tokens": (80.0, 100.0)}, cost_unknown_calls=0),
        ReviewVerdict(run_id="old", seq=2, round=1, verdict="stalled", reasons=[],
                      before_hash="a", after_hash="a"),
        GuardTripped(run_id="old", seq=3, call_id="c1", tool="poll", fingerprint="f"),
        GuardTripped(run_id="old", seq=4, call_id="c1", tool="poll", fingerprint="f"),
        OperatorCommand(run_id="old", seq=5, command="pause", by="op"),
    ]  # fmt: skip
    runs = [("old", "deciding", time.time()), ("done", "complete", None)]
    statements: list[tuple[str, tuple[Any, ...]]] = [
        *(("INSERT INTO runs (run_id, env, script, model, state, started_at, pid, host,"
           " heartbeat_at) VALUES (?, 'e', 's', 'm', ?, '2026-01-01T00:00:00+00:00', 1,"
           " 'elsewhere', ?)", run) for run in runs),
        *(("INSERT INTO events (run_id, seq, kind, at, body) VALUES (?, ?, ?, ?, ?)",
           event_row(event)) for event in events),
        ("INSERT INTO approvals (run_id, call_id, tool, args, requested_at, expires_at, state)"
         " VALUES ('old', 'c9', 'refund', '{}', '2026-01-01T00:00:01+00:00',"
         " '2999-01-01T00:00:00+00:00', 'pending')", ()),
    ]  # fmt: skip
    if isinstance(location, str):
        with psycopg.connect(location, autocommit=True) as conn:
            conn.execute(V3_TABLES)
            for sql, params in statements:
                conn.execute(sql.replace("?", "%s"), params)
    else:
        import sqlite3

        con = sqlite3.connect(location)
        con.executescript(V3_TABLES)
        for sql, params in statements:
            con.execute(sql, params)
        con.commit()
        con.close()


async def test_a_v3_store_is_brought_forward_with_its_runs_summarized(location: Location) -> None:
    _v3_store(location)
    store = await open_store(location)
    try:
        version = await store.fetchall("SELECT value FROM meta WHERE key = 'schema_version'")
        assert version[0][0] == str(SCHEMA_VERSION)
        fleet = Fleet()
        await fleet.refresh(store)
        old, done = fleet.rows["old"], fleet.rows["done"]
        assert (old.closest, old.last_finding, old.repeats) == ("tokens 80%", "stalled", 2)
        assert old.paused and old.pending == 1 and old.seen_seq == 5
        assert old.soonest_expiry is not None and old.soonest_expiry.year == 2999
        assert not done.live and done.seen_seq == 0
        # From now on the old run's row moves with what is done to it, like any other.
        other = await open_store(location)
        try:
            await other.execute("UPDATE approvals SET state = 'rejected' WHERE call_id = 'c9'")
        finally:
            await other.close()
        await refreshed_until(fleet, store, lambda: fleet.rows["old"].pending == 0)
        assert fleet.rows["old"].pending == 0
    finally:
        await store.close()
