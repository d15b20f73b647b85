"""The PostgreSQL store (issue 12): appends and the approval round trip, next to SQLite.

1. Events/s appended through the EventWriter (batched commits, the runtime's path) to a
   throwaway PostgreSQL cluster on loopback, and to a SQLite file, the same 20,000 events;
   and next to it psycopg's own COPY of the same rows (already serialized and chained, in
   the writer's binary encoding, one COPY, one commit) on the same server: the writer's rate
   as a share of it (target >= 60 %), best of 3 on each side.
2. The approval round trip on both backends: a runner process waits on a write
   (`--approve wait`); this process commits the decision; the figure is the time from that
   commit to the runner's `approval_decided` event (it is emitted as the runner learns the
   decision, right before the tool starts). PostgreSQL wakes the runner by NOTIFY; SQLite's
   runner polls every 100 ms. Median of 5.

    .venv/bin/python bench/pg_store.py
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psycopg
import store_throughput
from store_throughput import runner_collector, stored_rows, synthetic_run

from loopdeck.core.events import ApprovalDecided
from loopdeck.store import queries
from loopdeck.store.base import Location
from loopdeck.store.chain import CHAINED_COLUMNS
from loopdeck.store.opening import open_store
from loopdeck.store.pg_connection import COPY_TYPES

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE.parent / "tests"))

from pg_cluster import Cluster  # noqa: E402  (the tests' throwaway cluster)
from store_helpers import start_runner, wait_for_pending  # noqa: E402

EVENTS = 20_000
ROUND_TRIPS = 5
TARGET_SHARE = 0.6  # the writer's appends, at least 60 % of psycopg's own COPY


async def append_rate(location: Location, count: int) -> float:
    """Events/s through the EventWriter, as `store_throughput.append_rate` measures it on
    SQLite (the same producer)."""
    store = await open_store(location)
    try:
        events = synthetic_run(f"bench-{time.time_ns()}", count)
        return await store_throughput.append_rate(store, events)
    finally:
        await store.close()


async def copy_rate(url: str, count: int) -> float:
    """Rows/s of psycopg's own COPY of the same events' rows (serialized and chained
    beforehand), in the writer's encoding (binary, its column types), one COPY and one
    commit: the most the server and driver take."""
    await (await open_store(url)).close()  # the schema
    rows = stored_rows(synthetic_run(f"copy-{time.time_ns()}", count))
    types = COPY_TYPES["events"]
    async with await psycopg.AsyncConnection.connect(url) as conn:
        start = time.perf_counter()
        async with (
            conn.cursor() as cursor,
            cursor.copy(
                f"COPY events ({', '.join(CHAINED_COLUMNS)}) FROM STDIN (FORMAT BINARY)"
            ) as copy,
        ):
            copy.set_types([types[column] for column in CHAINED_COLUMNS])
            for row in rows:
                await copy.write_row(row)
        await conn.commit()
        return count / (time.perf_counter() - start)


async def round_trip_s(location: Location) -> float:
    sample = HERE.parent / "sample_envs" / "order_support"
    runner = start_runner(sample, "solve", location, "--approve", "wait")
    try:
        pending = await wait_for_pending(location, timeout=120)
        store = await open_store(location, create=False)
        try:
            await queries.decide(
                store, pending["run_id"], pending["call_id"], approved=True, by="bench"
            )
            committed = time.time()
            runner.communicate(timeout=120)
            decided = await queries.last_event(store, pending["run_id"], ApprovalDecided)
        finally:
            await store.close()
    finally:
        runner.kill()
    assert decided is not None
    return decided.at.timestamp() - committed


async def measure() -> dict[str, Any]:
    cluster = Cluster().start()
    os.environ["PGPASSWORD"] = cluster.password
    try:
        with tempfile.TemporaryDirectory() as folder:
            sqlite = Path(folder) / "bench.db"
            # Best of 3 on each side, side by side (the machine's noise, not the code's), with
            # the collector tuned as a runner's process is.
            appends, copies, sqlite_appends = [], [], []
            with runner_collector():
                for _ in range(3):
                    appends.append(await append_rate(cluster.bare_url, EVENTS))
                    copies.append(await copy_rate(cluster.bare_url, EVENTS))
                    sqlite_appends.append(await append_rate(sqlite, EVENTS))
            figures = {
                "postgresql appends/s": max(appends),
                "postgresql COPY rows/s": max(copies),
                "sqlite appends/s": max(sqlite_appends),
            }
            for name, location in (("postgresql", cluster.bare_url), ("sqlite", sqlite)):
                trips = [await round_trip_s(location) for _ in range(ROUND_TRIPS)]
                figures[f"{name} approval round trip ms"] = statistics.median(trips) * 1000
    finally:
        cluster.stop()
    return figures


def main() -> None:
    figures = asyncio.run(measure())
    print(json.dumps(figures, indent=1))
    print(
        f"appends: PostgreSQL {figures['postgresql appends/s']:,.0f} events/s, SQLite "
        f"{figures['sqlite appends/s']:,.0f} events/s ({EVENTS:,} events, batched commits)"
    )
    share = figures["postgresql appends/s"] / figures["postgresql COPY rows/s"]
    print(
        f"PostgreSQL appends through the writer: {share:.0%} of psycopg's own COPY of the same"
        f" rows ({figures['postgresql COPY rows/s']:,.0f} rows/s)  target >= {TARGET_SHARE:.0%}"
        f"  {'PASS' if share >= TARGET_SHARE else 'FAIL'}"
    )
    print(
        "approval round trip (decision committed → the runner's tool starts), median of "
        f"{ROUND_TRIPS}: PostgreSQL {figures['postgresql approval round trip ms']:.0f} ms "
        f"(NOTIFY), SQLite {figures['sqlite approval round trip ms']:.0f} ms (100 ms poll)"
    )


if __name__ == "__main__":
    main()
