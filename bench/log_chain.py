"""The hash chain's cost (issue 41): the writer's appends with and without it.

Events/s appended through the EventWriter (batched commits, the runtime's path) with each
event linked into its run's hash chain, and through the same writer with the chain taken out
(`Unchained`: nothing linked, no hash stored), on a SQLite file and on a throwaway PostgreSQL
cluster on loopback. Each round measures both, back to back (which goes first alternates),
and the figure is the median of the rounds' ratios: a machine busy with other work slows a
round's two sides alike, where the best of each side could come from a quiet moment of one.
Target: appends with the chain at least 90 % of appends without it.

Each side's CPU a event (this process's, both threads: the runtime's and the store's; not a
PostgreSQL server's) is printed beside it: on a busy machine a side's time is mostly its CPU,
and the wall ratio swings with the two or three commits (and fsyncs) a side makes; the CPU
figures say what the chain costs.

    .venv/bin/python bench/log_chain.py [EVENTS]
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from store_throughput import synthetic_run
from targets_table import Row, print_table

from loopdeck.core.events import EventBus
from loopdeck.store.base import Location, Tx
from loopdeck.store.chain import ChainedRow, EventRow, LinkedRow, RunChain
from loopdeck.store.opening import open_store
from loopdeck.store.writer import BATCH_MAX, EventWriter

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE.parent / "tests"))

from pg_cluster import Cluster, ClusterUnavailable  # noqa: E402  (the tests' throwaway cluster)

EVENTS = 10_000
ROUNDS = 21  # each measures both sides
TARGET = 0.9  # appends with the chain, at least 90 % of appends without it


class Unchained(RunChain):
    """The writer without its chain: no event linked, rows appended with no hash."""

    def queued(self, seq: int, row: EventRow) -> ChainedRow:
        return (*row, None)

    async def rows(
        self, tx: Tx, run_id: str, first: int, rows: Sequence[LinkedRow]
    ) -> list[ChainedRow]:
        return [row for _, _, row in rows]

    def committed(self, last: ChainedRow | None, more_queued: bool) -> None:
        return None


async def append_rate(location: Location, count: int, *, chained: bool) -> tuple[float, float]:
    """Events/s from the first publish until the last batch is durable, and the process's CPU
    a event meanwhile (us)."""
    store = await open_store(location)
    try:
        bus = EventBus()
        writer = EventWriter(store)
        if not chained:
            writer.chain = Unchained()
        bus.subscribe(writer)
        writer.start()
        events = synthetic_run(f"chain-{chained}-{time.time_ns()}", count)
        start, cpu = time.perf_counter(), time.process_time()
        for n, event in enumerate(events, 1):
            bus.publish(event)
            if n % BATCH_MAX == 0:  # the producer yields to the loop, as a runtime's step does
                await asyncio.sleep(0)
        await writer.close()
        return count / (time.perf_counter() - start), (time.process_time() - cpu) / count * 1e6
    finally:
        await store.close()


async def compared(backend: str, location: Location, count: int) -> Row:
    """ROUNDS rounds of both sides: the median of their ratios, the median of each side."""
    with_chain, without, ratios = [], [], []
    cpu: dict[bool, list[float]] = {True: [], False: []}
    for round_ in range(ROUNDS):
        first = round_ % 2 == 0  # the chained side first in every other round
        one = await append_rate(location, count, chained=first)
        other = await append_rate(location, count, chained=not first)
        (chained, chained_cpu), (unchained, unchained_cpu) = (one, other) if first else (other, one)
        with_chain.append(chained)
        without.append(unchained)
        ratios.append(chained / unchained)
        cpu[True].append(chained_cpu)
        cpu[False].append(unchained_cpu)
    print(
        f"{backend}: CPU a event {statistics.median(cpu[True]):.2f} us with the chain,"
        f" {statistics.median(cpu[False]):.2f} us without it (medians of {ROUNDS} rounds)"
    )
    return Row(
        f"41 {backend} appends with the hash chain",
        f"{statistics.median(with_chain):,.0f} ev/s", f"{statistics.median(without):,.0f} ev/s",
        statistics.median(ratios), f">= {TARGET}x",
    )  # fmt: skip


async def measure(count: int = EVENTS) -> list[Row]:
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        rows.append(await compared("sqlite", Path(folder) / "chain.db", count))
    try:
        cluster = Cluster().start()
    except ClusterUnavailable as exc:
        print(f"PostgreSQL not measured: {exc}")
        return rows
    os.environ["PGPASSWORD"] = cluster.password
    try:
        rows.append(await compared("postgresql", cluster.bare_url, count))
    finally:
        cluster.stop()
    for row in rows:
        print(
            f"{row.target}: {row.figure}, without it {row.reference}: {row.ratio:.1%} ({count:,}"
            f" events a side, medians of {ROUNDS} rounds; load average {os.getloadavg()[0]:.1f})"
        )
    return rows


if __name__ == "__main__":
    print_table(asyncio.run(measure(int(sys.argv[1]) if len(sys.argv) > 1 else EVENTS)))
