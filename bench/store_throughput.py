"""The event store: events appended per second, and loading a 100,000-event run.

.venv/bin/python bench/store_throughput.py [EVENTS]
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
from pathlib import Path

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
from loopdeck.store.database import Store
from loopdeck.store.writer import EventWriter


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


async def main(count: int) -> None:
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
        print(f"appended {count} events in {elapsed:.2f} s: {count / elapsed:,.0f} events/s")

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


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 100_000))
