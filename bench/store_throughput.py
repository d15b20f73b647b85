"""The event store: events appended per second, and loading a 100,000-event run.

.venv/bin/python bench/store_throughput.py [EVENTS]
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import cast

from targets_table import Row, print_table

from loopdeck.core.events import (
    BudgetUpdated,
    CallProposed,
    CallStatus,
    Event,
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
from loopdeck.store.chain import CHAINED_COLUMNS, GENESIS, ChainedRow, link
from loopdeck.store.event_rows import event_row
from loopdeck.store.opening import open_store
from loopdeck.store.sqlite import SCHEMA
from loopdeck.store.writer import BATCH_MAX, EventWriter
from loopdeck.tuning import collector


def synthetic_run(run_id: str, count: int) -> list[EventBase]:
    """A runaway's shape: per call a proposal, two state moves, a result and a budget update,
    each made by `EventBus.emit` as the runtime makes it (numbered; its JSON made there if
    emit makes it), so publishing it hands it out as it is."""
    bus = EventBus()
    events: list[EventBase] = [
        bus.emit(
            RunStarted, run_id=run_id, env="bench", script="poll", model="m", mode="rounds",
            goal="g", budget={"max_turns": 1e9},
        )
    ]  # fmt: skip
    call = 0
    while len(events) < count:
        call += 1
        call_id = f"c{call}"
        events += [
            bus.emit(
                CallProposed, run_id=run_id, call_id=call_id, round=1, tool="poll",
                args={"job": "j1"}, risk="read", fingerprint="abc123abc123",
                state_hash="def456def456",
            ),
            bus.emit(
                StateChanged, run_id=run_id, source=RunState.DECIDING, target=RunState.EXECUTING
            ),
            bus.emit(
                ToolFinished, run_id=run_id, call_id=call_id, tool="poll",
                status=CallStatus.EXECUTED,
                result={"ok": True, "data": {"status": "running"}, "error": None},
                duration_ms=0.1,
            ),
            bus.emit(
                StateChanged, run_id=run_id, source=RunState.EXECUTING, target=RunState.DECIDING
            ),
            bus.emit(
                BudgetUpdated, run_id=run_id,
                usage={"tokens": (call * 10.0, 1e9), "cost_usd": (0.0, 1.0)},
            ),
        ]  # fmt: skip
    return events[:count]


async def append_rate(store: Store, events: list[EventBase]) -> float:
    """Events/s through the EventWriter (the runtime's path: serialized and linked as they
    are published, committed in batches), from the first publish until the last batch is
    durable. The producer yields to the loop every BATCH_MAX events, as a runtime's steps do."""
    bus = EventBus()
    writer = EventWriter(store)
    bus.subscribe(writer)
    writer.start()
    start = time.perf_counter()
    for n, event in enumerate(events, 1):
        bus.publish(event)
        if n % BATCH_MAX == 0:
            await asyncio.sleep(0)
    await writer.close()
    return len(events) / (time.perf_counter() - start)


def stored_rows(events: list[EventBase]) -> list[ChainedRow]:
    """The rows the writer stores for these events (one run, numbered from 1): each event's
    row and its link in the run's hash chain, made beforehand (for the engines' own rates)."""
    rows: list[ChainedRow] = []
    prev = GENESIS
    for event in events:
        row = event_row(cast(Event, event))
        prev = link(prev, row[4])
        rows.append((*row, prev))
    return rows


def raw_sqlite_rate(folder: str, events: list[EventBase]) -> float:
    """Python's sqlite3 alone: the same rows (serialized and chained beforehand), the same
    table and indexes, WAL with synchronous=FULL (the store's settings), one transaction per
    BATCH_MAX rows, each one `executemany`."""
    rows = stored_rows(events)
    db = sqlite3.connect(Path(folder) / "raw.db", isolation_level=None)
    db.execute("DROP TABLE IF EXISTS events")
    db.execute("PRAGMA journal_mode = WAL")
    db.execute("PRAGMA synchronous = FULL")
    for statement in SCHEMA.split(";"):
        if "events" in statement:
            db.execute(statement)
    insert = f"INSERT INTO events ({', '.join(CHAINED_COLUMNS)}) VALUES (?, ?, ?, ?, ?, ?)"
    start = time.perf_counter()
    for i in range(0, len(rows), BATCH_MAX):
        db.execute("BEGIN IMMEDIATE")
        db.executemany(insert, rows[i : i + BATCH_MAX])
        db.execute("COMMIT")
    elapsed = time.perf_counter() - start
    db.close()
    return len(rows) / elapsed


@contextlib.contextmanager
def runner_collector() -> Iterator[None]:
    """The collector's thresholds a headless runner sets (`tuning.collector`), for a while."""
    before = gc.get_threshold()
    gc.set_threshold(*collector.THRESHOLDS)
    try:
        yield
    finally:
        gc.set_threshold(*before)


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
        while screen.view.stop_reason is None or screen.arrived:
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
        # through the EventWriter, three of the same rows through sqlite3 alone, side by side,
        # with the collector tuned as a runner's process is (`tuning.collector`).
        rate, raw = 0.0, 0.0
        with runner_collector():
            for round_ in range(3):
                run_id = "bench-run" if round_ == 0 else f"bench-run-{round_}"
                events = synthetic_run(run_id, count)
                rate = max(rate, await append_rate(store, events))
                raw = max(raw, raw_sqlite_rate(folder, events))
            del events  # the load below reads what was stored, with nothing else alive
        print(f"appended {count} events: {rate:,.0f} events/s, best of 3")
        print(
            f"sqlite3 alone, the same rows already serialized and chained: {raw:,.0f} rows/s,"
            " best of 3"
        )

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
            ">= 0.5x"),
        Row("5 load a 100,000-event run", f"{total:.2f} s", "1 s", total / 1.0, "<= 1x"),
    ]  # fmt: skip


if __name__ == "__main__":
    if sys.argv[1:2] == ["--load"]:
        load, with_start = asyncio.run(console_load_time(Path(sys.argv[2]), sys.argv[3]))
        print(f"{load} {with_start}")
        sys.exit(0)
    print_table(asyncio.run(measure(int(sys.argv[1]) if len(sys.argv) > 1 else 100_000)))
