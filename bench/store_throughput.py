"""The event store: events appended per second, and loading a 100,000-event run.

.venv/bin/python bench/store_throughput.py [EVENTS]
"""

from __future__ import annotations

import asyncio
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

from targets_table import Row, print_table

from loopdeck.core.events import (
    BudgetUpdated,
    CallProposed,
    CallStatus,
    EventBase,
    EventBus,
    RunStarted,
    StateChanged,
    ToolFinished,
)
from loopdeck.core.states import RunState
from loopdeck.operator.links import load_events
from loopdeck.operator.runview import RunView
from loopdeck.store.database import SCHEMA, Store
from loopdeck.store.writer import BATCH_MAX, EventWriter, event_json


def synthetic_run(run_id: str, count: int) -> list[EventBase]:
    """A runaway's shape: per call a proposal, two state moves, a result and a budget update."""
    events: list[EventBase] = [
        RunStarted(
            run_id=run_id, env="bench", script="poll", model="m", mode="rounds", goal="g",
            budget={"max_turns": 1e9},
        )
    ]  # fmt: skip
    call = 0
    while len(events) < count:
        call += 1
        call_id = f"c{call}"
        events += [
            CallProposed(
                run_id=run_id, call_id=call_id, round=1, tool="poll", args={"job": "j1"},
                risk="read", fingerprint="abc123abc123", state_hash="def456def456",
            ),
            StateChanged(run_id=run_id, source=RunState.DECIDING, target=RunState.EXECUTING),
            ToolFinished(
                run_id=run_id, call_id=call_id, tool="poll", status=CallStatus.EXECUTED,
                result={"ok": True, "data": {"status": "running"}, "error": None}, duration_ms=0.1,
            ),
            StateChanged(run_id=run_id, source=RunState.EXECUTING, target=RunState.DECIDING),
            BudgetUpdated(
                run_id=run_id, usage={"tokens": (call * 10.0, 1e9), "cost_usd": (0.0, 1.0)},
                cost_unknown_calls=0,
            ),
        ]  # fmt: skip
    return events[:count]


def raw_sqlite_rate(folder: str, events: list[EventBase]) -> float:
    """Python's sqlite3 alone: the same rows, already serialized, the same table and indexes,
    WAL with synchronous=FULL (the store's settings), one transaction per 512 rows."""
    rows = [
        (e.run_id, seq, getattr(e, "kind", ""), e.at.isoformat(), event_json(e))
        for seq, e in enumerate(events, 1)
    ]
    db = sqlite3.connect(Path(folder) / "raw.db", isolation_level=None)
    db.execute("PRAGMA journal_mode = WAL")
    db.execute("PRAGMA synchronous = FULL")
    for statement in SCHEMA.split(";"):
        if "events" in statement:
            db.execute(statement)
    start = time.perf_counter()
    for i in range(0, len(rows), BATCH_MAX):
        db.execute("BEGIN IMMEDIATE")
        db.executemany(
            "INSERT INTO events (run_id, seq, kind, at, body) VALUES (?, ?, ?, ?, ?)",
            rows[i : i + BATCH_MAX],
        )
        db.execute("COMMIT")
    elapsed = time.perf_counter() - start
    db.close()
    return len(rows) / elapsed


async def measure(count: int) -> list[Row]:
    with tempfile.TemporaryDirectory() as folder:
        store = await Store.open(Path(folder) / "bench.db")
        bus = EventBus()
        writer = EventWriter(store)
        bus.subscribe(writer)
        writer.start()
        events = synthetic_run("bench-run", count)
        start = time.perf_counter()
        for event in events:
            bus.publish(event)
            if len(writer._queue) >= 2048:  # let the writer's loop run, as the runtime does
                await asyncio.sleep(0)
        await writer.close()
        elapsed = time.perf_counter() - start
        rate = count / elapsed
        print(f"appended {count} events in {elapsed:.2f} s: {rate:,.0f} events/s (serialized here)")
        raw = raw_sqlite_rate(folder, events)
        print(f"sqlite3 alone, the same rows already serialized: {raw:,.0f} rows/s")

        start = time.perf_counter()
        loaded = await load_events(store, "bench-run")
        fetched = time.perf_counter() - start
        view = RunView()
        for event in loaded:
            view.apply(event)
        total = time.perf_counter() - start
        print(
            f"loaded a {len(loaded)}-event run into the console's state in {total:.2f} s "
            f"(read + parse {fetched:.2f} s, fold {total - fetched:.2f} s; "
            f"{view.calls_seen} calls, {len(view.calls)} rows kept)"
        )
        await store.close()
    return [
        Row("5 store appends vs sqlite3", f"{rate:,.0f} ev/s", f"{raw:,.0f} rows/s", rate / raw,
            ">= 0.4x"),
        Row("5 load a 100,000-event run", f"{total:.2f} s", "1 s", total / 1.0, "<= 1x"),
    ]  # fmt: skip


if __name__ == "__main__":
    print_table(asyncio.run(measure(int(sys.argv[1]) if len(sys.argv) > 1 else 100_000)))
