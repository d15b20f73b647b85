"""The fleet keeping up (issues 10 and 30): one console following a fleet of live runs.

PostgreSQL, a fleet of a thousand: a throwaway cluster on loopback; 10 writer processes, each
a host of its own (`LOOPDECK_HOST`), each recording 100 runs' events through the real
`EventWriter` (`bench/fleet_writers.py`), about 1,000 events/s in all. This process follows
the store as the fleet screen does, with the console's collector (`as_console.py`):
`Fleet.refresh` driven by `following.poll` (woken by the store's NOTIFY, reading the change
feed: only the runs that changed). SQLite, the fleet of a hundred: one writer process, 100
runs, the same rate, the follower polling every 100 ms.

Printed for each: the lag from a batch's commit to the fleet showing that run at (at least)
that event, median and p99, over every committed batch; the follower's CPU time and its peak
RSS. Targets: p99 lag <= 250 ms, RSS <= 200 MB. Then the console's own part of a refresh,
`render_fleet` at 100, 1,000 and 3,000 runs (`fleet_render.py`), as target lines.

    .venv/bin/python bench/fleet_lag.py [SECONDS] [--postgresql-only | --sqlite-only]
"""

from __future__ import annotations

import asyncio
import bisect
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

from as_console import console_collector
from fleet_render import measure as render_costs
from fleet_writers import CommitLog, start_writers
from targets_table import print_table

from loopdeck.operator import following
from loopdeck.operator.fleet import Fleet
from loopdeck.store.base import Location
from loopdeck.store.opening import open_store

sys.path.insert(0, str(Path(__file__).parent.parent / "tests"))
from pg_cluster import Cluster

RATE = 1000.0  # events per second, all runs together
TARGET_P99_MS = 250.0
TARGET_RSS_MB = 200.0

# What the follower saw: per run, the times it showed a newer event, and that event's number.
Seen = dict[str, tuple[list[int], list[float]]]


async def follow(location: Location, seconds: float, hosts: int, runs_each: int) -> dict:  # type: ignore[type-arg]
    store = await open_store(location)  # the schema, as a first runner would make it
    fleet, seen, stop = Fleet(), {}, asyncio.Event()

    def changed() -> None:
        now = time.time()
        for row in fleet.rows.values():
            seqs, times = seen.setdefault(row.run_id, ([], []))
            if not seqs or row.seen_seq > seqs[-1]:
                seqs.append(row.seen_seq)
                times.append(now)

    try:
        writers = start_writers(
            location, hosts=hosts, runs_each=runs_each, seconds=seconds, rate=RATE
        )
        cpu0, wall0 = time.process_time(), time.monotonic()
        reading = asyncio.create_task(following.poll(fleet, store, stop, changed))
        try:
            logs = await asyncio.to_thread(writers.wait, seconds + 600)
            await asyncio.sleep(1.0)  # the last commits' reads
        finally:
            stop.set()
            await reading
            writers.stop()
        cpu, wall = time.process_time() - cpu0, time.monotonic() - wall0
    finally:
        await store.close()
    return {"lags": _lags(logs, seen), "commits": sum(map(len, logs)), "cpu": cpu, "wall": wall,
            "runs": len(fleet.rows)}  # fmt: skip


def _lags(logs: list[CommitLog], seen: Seen) -> list[float]:
    """For each committed batch, the time until the fleet showed its run at that event or a
    later one (a batch superseded before a read counts from its own commit)."""
    lags = []
    for log in logs:
        for run_id, seq, committed in log:
            seqs, times = seen.get(run_id, ([], []))
            at = bisect.bisect_left(seqs, seq)
            if at < len(seqs):
                lags.append(max(0.0, times[at] - committed))
    return sorted(lags)


def report(name: str, figures: dict, seconds: float) -> None:  # type: ignore[type-arg]
    lags = figures["lags"]
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    median = statistics.median(lags) * 1000
    p99 = lags[max(0, int(len(lags) * 0.99) - 1)] * 1000
    print(f"{name}: fleet following {figures['runs']:,} live runs at ~{RATE:,.0f} events/s"
          f" for {seconds:g} s")  # fmt: skip
    print(f"  batches seen: {len(lags):,} of {figures['commits']:,} committed")
    verdict = "PASS" if p99 <= TARGET_P99_MS else "FAIL"
    print(f"  lag commit → fleet: median {median:.0f} ms, p99 {p99:.0f} ms"
          f"  target p99 <= {TARGET_P99_MS:.0f} ms  {verdict}")  # fmt: skip
    print(f"  follower CPU {figures['cpu']:.2f} s over {figures['wall']:.1f} s"
          f" ({figures['cpu'] / figures['wall']:.0%} of a core)")  # fmt: skip
    print(f"  follower peak RSS {rss_mb:.0f} MB  target <= {TARGET_RSS_MB:.0f} MB  "
          f"{'PASS' if rss_mb <= TARGET_RSS_MB else 'FAIL'}")  # fmt: skip


def postgresql(seconds: float) -> None:
    cluster = Cluster().start()
    os.environ["PGPASSWORD"] = cluster.password
    try:
        with console_collector():  # the console's, which the fleet screen runs in
            figures = asyncio.run(follow(cluster.bare_url, seconds, hosts=10, runs_each=100))
    finally:
        cluster.stop()
    report("PostgreSQL, 10 hosts x 100 runs", figures, seconds)


def sqlite(seconds: float) -> None:
    with tempfile.TemporaryDirectory() as folder, console_collector():
        figures = asyncio.run(follow(Path(folder) / "fleet.db", seconds, 1, runs_each=100))
    report("SQLite, 1 host x 100 runs", figures, seconds)


def main() -> None:
    numbers = [arg for arg in sys.argv[1:] if not arg.startswith("--")]
    seconds = float(numbers[0]) if numbers else 20.0
    if "--sqlite-only" not in sys.argv:
        postgresql(seconds)
    if "--postgresql-only" not in sys.argv:
        sqlite(seconds)
    print_table(render_costs())  # what the console adds to each refresh, by fleet size


if __name__ == "__main__":
    main()
