"""Runs placed on workers (issue 42): a thousand runs of `shared_orders` (its orders in a
folder every worker sees, each look at an order taking STEP_S) submitted to one PostgreSQL
store on a throwaway loopback cluster, ten `loopdeck worker` processes (each a host of its
own) claiming and running them, and this process following the store as the console's fleet
does (`Fleet.refresh` driven by `following.poll`, woken by NOTIFY), with the queue read every
50 ms beside it.

Printed: from a claim (the lease seen held) to the run's first event in the fleet, median and
p99; from each batch's commit (PostgreSQL's own commit time, `track_commit_timestamp`) to the
fleet showing its run at that batch's last event, median and p99, over every batch of every
run (issue 42's "the fleet's commit→screen p99", measured as `fleet_lag.py` measures it); how
long the thousand took. Targets: claim → first event p99 <= 2 s, commit → fleet p99 <= 250 ms.
Printed beside them, with no target of their own: from an event's making (its `at`, before
the writer's batch and commit) to its commit and to the fleet, over every event: the worker's
own part (its batching, and its commit waiting for its turn on its CPU and its connection).

The same for a hundred runs on one worker that reaches PostgreSQL through a proxy delaying
each way by 1 ms (`delaying_proxy.py`), as a server on another host would be: what a worker's
commits pay in round trips, which on loopback cost nearly nothing.

And what recording a run's inputs costs (`record_inputs`: each model reply and each change of
the env's state in the log, what makes a run resumable and forkable): supervised steps/s of
a zero-latency model (`steps_per_second.py`'s loop) with it over without it, the median of
rounds that measure both back to back. Target: at least 85 %.

    .venv/bin/python bench/workers.py [RUNS] [WORKERS]
"""

from __future__ import annotations

import asyncio
import bisect
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from as_console import console_collector
from delaying_proxy import DelayingProxy
from targets_table import Row

from loopdeck.operator import following
from loopdeck.operator.fleet import Fleet
from loopdeck.operator.launch import RunOptions
from loopdeck.operator.placement import checked, submitted
from loopdeck.store import leases
from loopdeck.store.base import Location, Store
from loopdeck.store.opening import open_store

sys.path.insert(0, str(Path(__file__).parent.parent / "tests"))
from pg_cluster import Cluster

STEP_S = 2.0
FAR_RUNS = 100  # on one worker, PostgreSQL FAR_DELAY_S away each way
FAR_DELAY_S = 0.001
CLAIM_TARGET_MS = 2000.0
LAG_TARGET_MS = 250.0
BOUND_S = 900.0


def start_workers(url: str, workers: int, slots: int) -> list[subprocess.Popen[str]]:
    command = [sys.executable, "-m", "loopdeck", "worker", "--db", url, "--slots", str(slots)]
    started = []
    for i in range(workers):
        env = {**os.environ, "LOOPDECK_HOST": f"worker-{i:02d}"}
        quiet = subprocess.DEVNULL
        started.append(subprocess.Popen(command, stdout=quiet, stderr=quiet, env=env))
    return started


async def submit_all(store: Store, runs: int, root: Path, prefix: str = "bench") -> list[str]:
    settings = [f'data.state_root="{root}"', f"data.step_s={STEP_S}"]
    run = checked(RunOptions(env="shared_orders", script="solve", approve="auto",
                             settings=settings))  # fmt: skip
    kept = submitted(run)
    ids = [f"{prefix}{n:05d}" for n in range(runs)]
    for run_id in ids:
        await leases.submit(store, run_id, {**kept, "run_id": run_id})
    return ids


async def watch_claims(store: Store, claimed: dict[str, float], stop: asyncio.Event) -> None:
    """When each run was first claimed: its lease's `moved_at` (the worker's clock at the
    claim, this machine's) when first seen held, else when first seen out of the queue; only
    the leases moved since the last look are read."""
    since = 0.0
    while not stop.is_set():
        now = time.time()
        rows = await store.fetchall(
            "SELECT run_id, state, moved_at FROM leases WHERE state != 'queued' AND moved_at >= ?",
            (since,),
        )
        for row in rows:
            first = float(row[2]) if row[1] == "held" else now
            claimed.setdefault(str(row[0]), min(first, now))
        since = now - 10.0  # a look late by up to that (a loaded machine) misses none
        await asyncio.sleep(0.05)


async def follow(
    url: Location, runs: int, workers: int, worker_url: str | None = None, prefix: str = "bench"
) -> dict[str, Any]:
    """The runs submitted and followed at `url`, the workers reaching it at `worker_url`
    (default: the same). The follower has the console's collector (`as_console`)."""
    with console_collector():
        return await _follow(url, runs, workers, worker_url, prefix)


async def _follow(
    url: Location, runs: int, workers: int, worker_url: str | None, prefix: str
) -> dict[str, Any]:
    store = await open_store(url)
    fleet, stop = Fleet(), asyncio.Event()
    seen: dict[str, tuple[list[int], list[float]]] = {}
    claimed: dict[str, float] = {}

    def changed() -> None:
        """The runs this refresh changed (the fleet lists a run from its submission on:
        its events are what is timed)."""
        now = time.time()
        for run_id in fleet.take_touched():
            row = fleet.rows[run_id]
            seqs, times = seen.setdefault(row.run_id, ([], []))
            if row.seen_seq and (not seqs or row.seen_seq > seqs[-1]):
                seqs.append(row.seen_seq)
                times.append(now)

    with tempfile.TemporaryDirectory() as folder:
        ids = await submit_all(store, runs, Path(folder), prefix)
        started = time.monotonic()
        procs = start_workers(worker_url or str(url), workers, slots=runs // workers + 10)
        tasks = [asyncio.create_task(following.poll(fleet, store, stop, changed)),
                 asyncio.create_task(watch_claims(store, claimed, stop))]  # fmt: skip
        try:
            while time.monotonic() - started < BOUND_S:
                rows = await store.fetchall(
                    "SELECT COUNT(*) FROM leases WHERE state = 'ended' AND run_id LIKE ?",
                    (f"{prefix}%",),
                )
                if int(rows[0][0]) == runs:
                    break
                await asyncio.sleep(1.0)
            took = time.monotonic() - started
            await asyncio.sleep(1.0)  # the last commits' reads
        finally:
            stop.set()
            await asyncio.gather(*tasks)
            for proc in procs:
                proc.terminate()
            for proc in procs:
                proc.wait(timeout=60)
        made = await _made(store, ids)
    await store.close()
    return {"seen": seen, "claimed": claimed, "made": made, "took": took, "ids": ids}


Made = tuple[int, float, float]  # an event's number, when it was made, when it was committed


async def _made(store: Store, ids: list[str]) -> dict[str, list[Made]]:
    """Each run's events: their numbers, when they were made and when their transaction
    committed (the server's clock: this machine's)."""
    made: dict[str, list[Made]] = {}
    for run_id in ids:
        rows = await store.fetchall(
            "SELECT seq, body, EXTRACT(EPOCH FROM pg_xact_commit_timestamp(xmin)) FROM events"
            " WHERE run_id = ? ORDER BY seq",
            (run_id,),
        )
        made[run_id] = [(int(r[0]), _at(r[1]), float(r[2])) for r in rows]
    return made


def _at(body: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(json.loads(body)["at"]).timestamp()


@dataclasses.dataclass
class Figures:
    claims: list[float]  # claim -> the run's first event in the fleet
    starts: list[float]  # of it, claim -> its first event made (the worker's part)
    commits: list[float]  # each batch's commit -> the fleet showing its last event
    made: list[float]  # each event's making -> the fleet showing it
    waits: list[float]  # each event's making -> its commit (the worker's part)


def figures(found: dict[str, Any]) -> Figures:
    got = Figures([], [], [], [], [])
    for run_id in found["ids"]:
        seqs, times = found["seen"].get(run_id, ([], []))
        events = found["made"][run_id]
        if times and run_id in found["claimed"]:
            got.claims.append(max(0.0, times[0] - found["claimed"][run_id]))
            if events:
                got.starts.append(max(0.0, events[0][1] - found["claimed"][run_id]))
        last_of: dict[float, int] = {}  # each batch (its commit time) -> its last event
        for seq, at, committed in events:
            last_of[committed] = seq
            got.waits.append(max(0.0, committed - at))
            i = bisect.bisect_left(seqs, seq)
            if i < len(seqs):
                got.made.append(max(0.0, times[i] - at))
        for committed, seq in last_of.items():
            i = bisect.bisect_left(seqs, seq)
            if i < len(seqs):
                got.commits.append(max(0.0, times[i] - committed))
    for values in (got.claims, got.starts, got.commits, got.made, got.waits):
        values.sort()
    return got


def spread(values: list[float]) -> str:
    return f"median {statistics.median(values) * 1000:.0f} ms, p99 {p99(values) * 1000:.0f} ms"


def p99(values: list[float]) -> float:
    return values[max(0, int(len(values) * 0.99) - 1)] if values else float("nan")


def recording_cost(steps: int = 3000, rounds: int = 7) -> Row:
    from steps_per_second import ZeroLatencyModel, runtime_for
    from steps_per_second import measure as steps_per_s

    from loopdeck.core.recorded_inputs import record_inputs

    ratios = []
    for n in range(rounds):
        plain = runtime_for(steps, ZeroLatencyModel())
        recorded = runtime_for(steps, ZeroLatencyModel())
        record_inputs(recorded)
        sides = [(plain, "plain"), (recorded, "recorded")][:: 1 if n % 2 else -1]
        rates = {name: asyncio.run(steps_per_s(rt, steps)) for rt, name in sides}
        ratios.append(rates["recorded"] / rates["plain"])
    ratio = statistics.median(ratios)
    print(f"recording a run's inputs: {ratio:.0%} of the steps/s without it (median of {rounds})")
    return Row("workers: steps/s with inputs recorded / without", f"{ratio:.2f}", "1.00",
               ratio, ">= 0.85x")  # fmt: skip


def across_a_network(cluster: Cluster, runs: int, workers: int, delay_s: float) -> list[Row]:
    """The workers reach PostgreSQL through a proxy that delays each way by `delay_s`, as a
    server on another host would be; the fleet reads it directly. Few enough runs that this
    machine's cores are not what they wait on: what is measured is the round trips."""
    with DelayingProxy(cluster.port, delay_s) as port:
        far = cluster.bare_url.replace(f":{cluster.port}/", f":{port}/")
        found = asyncio.run(follow(cluster.bare_url, runs, workers, far, prefix="far"))
    got = figures(found)
    away = f"{delay_s * 1000:g} ms away"
    print(f"{runs} runs on {workers} worker(s), PostgreSQL {away} (each way): all ended in"
          f" {found['took']:.0f} s; claim -> first event p99 {p99(got.claims) * 1000:.0f} ms;"
          f" commit -> fleet {spread(got.commits)};"
          f" event made -> fleet {spread(got.made)}")  # fmt: skip
    return p99_rows(f"{runs} runs / {workers} worker, PostgreSQL {away}", got)


def p99_rows(name: str, got: Figures) -> list[Row]:
    """The two targets' lines: claim -> first event p99, commit -> fleet p99."""
    claims, commits = got.claims, got.commits
    return [
        Row(f"workers: claim -> first event p99 ({name})", f"{p99(claims) * 1000:.0f} ms",
            f"{CLAIM_TARGET_MS:.0f} ms", p99(claims) * 1000 / CLAIM_TARGET_MS, "<= 1x"),
        Row(f"workers: commit -> fleet p99 ({name})", f"{p99(commits) * 1000:.0f} ms",
            f"{LAG_TARGET_MS:.0f} ms", p99(commits) * 1000 / LAG_TARGET_MS, "<= 1x"),
    ]  # fmt: skip


def measure(runs: int = 1000, workers: int = 10) -> list[Row]:
    cluster = Cluster("track_commit_timestamp=on").start()  # each batch's commit time
    os.environ["PGPASSWORD"] = cluster.password
    try:
        found = asyncio.run(follow(cluster.bare_url, runs, workers))
        far = across_a_network(cluster, FAR_RUNS, 1, FAR_DELAY_S)
    finally:
        cluster.stop()
    got = figures(found)
    print(f"{runs:,} runs on {workers} workers (PostgreSQL): all ended in {found['took']:.0f} s")
    print(f"  claim -> first event in the fleet: {spread(got.claims)} over {len(got.claims):,}"
          " runs; of it, claim -> first event made (the worker):"
          f" {spread(got.starts)}")  # fmt: skip
    print(f"  commit -> fleet: {spread(got.commits)} over {len(got.commits):,} batches")
    print(f"  event made -> fleet: {spread(got.made)} over {len(got.made):,} events; of it,"
          " made -> committed (the worker's batching and its wait):"
          f" {spread(got.waits)}")  # fmt: skip
    name = f"{runs:,} runs / {workers} workers"
    return [*far, recording_cost(), *p99_rows(name, got)]


def main() -> None:
    numbers = [int(arg) for arg in sys.argv[1:] if arg.isdigit()]
    runs = numbers[0] if numbers else 1000
    workers = numbers[1] if len(numbers) > 1 else 10
    for row in measure(runs, workers):
        print(f"{row.target}: {row.figure} (target {row.reference})")


if __name__ == "__main__":
    main()
