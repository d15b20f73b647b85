"""The event store: events appended per second, and loading a 100,000-event run.

.venv/bin/python bench/store_throughput.py [EVENTS]
"""

from __future__ import annotations

import asyncio
import sqlite3
import subprocess
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
    RunStopped,
    StateChanged,
    ToolFinished,
)
from loopdeck.core.states import RunState, StopReason
from loopdeck.operator.links import load_events
from loopdeck.operator.runview import RunView
from loopdeck.store.base import Store
from loopdeck.store.opening import open_store
from loopdeck.store.sqlite import SCHEMA
from loopdeck.store.writer import BATCH_MAX, EventWriter, event_json


def synthetic_run(run_id: str, count: int) -> list[EventBase]:
    """A runaway's shape: per call a proposal, two state moves, a result and a budget update,
    each made with its number as the runtime makes it (`EventBus.emit`), so publishing it
    hands it out as it is."""
    events: list[EventBase] = [
        RunStarted(
            run_id=run_id, seq=1, env="bench", script="poll", model="m", mode="rounds", goal="g",
            budget={"max_turns": 1e9},
        )
    ]  # fmt: skip
    call = 0
    while len(events) < count:
        call += 1
        call_id = f"c{call}"
        n = len(events)
        events += [
            CallProposed(
                run_id=run_id, seq=n + 1, call_id=call_id, round=1, tool="poll", args={"job": "j1"},
                risk="read", fingerprint="abc123abc123", state_hash="def456def456",
            ),
            StateChanged(
                run_id=run_id, seq=n + 2, source=RunState.DECIDING, target=RunState.EXECUTING
            ),
            ToolFinished(
                run_id=run_id, seq=n + 3, call_id=call_id, tool="poll", status=CallStatus.EXECUTED,
                result={"ok": True, "data": {"status": "running"}, "error": None}, duration_ms=0.1,
            ),
            StateChanged(
                run_id=run_id, seq=n + 4, source=RunState.EXECUTING, target=RunState.DECIDING
            ),
            BudgetUpdated(
                run_id=run_id, seq=n + 5, usage={"tokens": (call * 10.0, 1e9),
                "cost_usd": (0.0, 1.0)}, cost_unknown_calls=0,
            ),
        ]  # fmt: skip
    return events[:count]


async def append_rate(store: Store, events: list[EventBase]) -> float:
    """Events/s from the first publish until the last batch is durable."""
    bus = EventBus()
    writer = EventWriter(store)
    bus.subscribe(writer)
    writer.start()
    start = time.perf_counter()
    for n, event in enumerate(events, 1):
        bus.publish(event)
        if n % BATCH_MAX == 0:  # the producer yields to the loop, as a runtime's step does
            await asyncio.sleep(0)
    await writer.close()
    return len(events) / (time.perf_counter() - start)


def raw_sqlite_rate(folder: str, events: list[EventBase]) -> float:
    """Python's sqlite3 alone: the same rows, already serialized, the same table and indexes,
    WAL with synchronous=FULL (the store's settings), one transaction per 512 rows."""
    rows = [
        (e.run_id, seq, getattr(e, "kind", ""), e.at.isoformat(), event_json(e))
        for seq, e in enumerate(events, 1)
    ]
    db = sqlite3.connect(Path(folder) / "raw.db", isolation_level=None)
    db.execute("DROP TABLE IF EXISTS events")
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


def stopped(run_id: str) -> RunStopped:
    return RunStopped(
        run_id=run_id, state=RunState.STOPPED, stop_reason=StopReason.TURN_LIMIT, detail="turns"
    )


async def console_load_time(db: Path, run_id: str) -> tuple[float, float]:
    """`loopdeck attach` on a stopped run: from the link's first read until its stop is drawn
    (the load), and from the console's start (the load plus the console's own start)."""
    from loopdeck import tuning
    from loopdeck.operator.store_link import StoreLink
    from loopdeck.tui.app import ConsoleStart, LoopdeckApp
    from loopdeck.tui.run_screen import RunScreen

    began: list[float] = []

    class TimedLink(StoreLink):
        async def drive(self) -> None:
            began.append(time.perf_counter())
            return await super().drive()

    tuning.for_console()  # as `loopdeck attach` tunes the process
    start = time.perf_counter()
    app = LoopdeckApp(ConsoleStart.for_link(TimedLink(db, run_id)))
    async with app.run_test(size=(160, 48)) as pilot:
        screen = next(s for s in app.screen_stack if isinstance(s, RunScreen))
        while screen.view.stop_reason is None or screen._buffer:
            await pilot.pause()
        await pilot.pause()
        end = time.perf_counter()
    return end - began[0], end - start


def console_load_in_a_fresh_process(db: Path) -> tuple[float, float]:
    """As `loopdeck attach` does it: a process of its own, holding nothing but the console."""
    out = subprocess.run(
        [sys.executable, __file__, "--load", str(db), "bench-run"],
        capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    return float(out[-2]), float(out[-1])


async def measure(count: int) -> list[Row]:
    with tempfile.TemporaryDirectory() as folder:
        store = await open_store(Path(folder) / "bench.db")
        # Best of 3 on each side (the machine's noise, not the code's): three runs appended
        # through the EventWriter, three of the same rows through sqlite3 alone.
        rate, raw = 0.0, 0.0
        for round_ in range(3):
            run_id = "bench-run" if round_ == 0 else f"bench-run-{round_}"
            events = synthetic_run(run_id, count)
            rate = max(rate, await append_rate(store, events))
            raw = max(raw, raw_sqlite_rate(folder, events))
        print(f"appended {count} events: {rate:,.0f} events/s (serialized here), best of 3")
        print(f"sqlite3 alone, the same rows already serialized: {raw:,.0f} rows/s, best of 3")

        start = time.perf_counter()
        loaded = await load_events(store, "bench-run")
        fetched = time.perf_counter() - start
        view = RunView()
        for event in loaded:
            view.apply(event)
        folded = time.perf_counter() - start
        print(
            f"read + parse {fetched:.2f} s, fold into the console's state {folded - fetched:.2f} s"
            f" ({len(loaded)} events, {view.calls_seen} calls, {len(view.calls)} rows kept)"
        )
        writer = EventWriter(store)  # the first run's stop, after its last event
        writer(stopped("bench-run").model_copy(update={"seq": count + 1}))
        await writer.close()
        await store.close()
        loads = [console_load_in_a_fresh_process(Path(folder) / "bench.db") for _ in range(3)]
        total, with_start = sorted(loads)[1]
        print(
            f"the console attached to the stopped run drew its stop {total:.2f} s after its"
            f" first read ({with_start:.2f} s after the console's start; median of 3:"
            f" {', '.join(f'{load:.2f}' for load, _ in loads)} s)"
        )
    return [
        Row("5 store appends vs sqlite3", f"{rate:,.0f} ev/s", f"{raw:,.0f} rows/s", rate / raw,
            ">= 0.4x"),
        Row("5 load a 100,000-event run", f"{total:.2f} s", "1 s", total / 1.0, "<= 1x"),
    ]  # fmt: skip


if __name__ == "__main__":
    if sys.argv[1:2] == ["--load"]:
        load, with_start = asyncio.run(console_load_time(Path(sys.argv[2]), sys.argv[3]))
        print(f"{load} {with_start}")
        sys.exit(0)
    print_table(asyncio.run(measure(int(sys.argv[1]) if len(sys.argv) > 1 else 100_000)))
