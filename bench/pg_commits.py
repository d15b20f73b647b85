"""What a worker's commit costs on PostgreSQL (issue 43, sixth round): a fenced event writer
committing one event at a time, its transaction sent statement by statement or pipelined
(`store/pg_batched.py`: everything held and sent together at its read and at its COMMIT), on a
throwaway loopback cluster, and the same through a proxy delaying each way by 1 ms. Printed:
wall and this process's CPU a commit, medians of interleaved rounds. No target: the figures
say what the batching saves.

    .venv/bin/python bench/pg_commits.py [COMMITS]
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import time
from pathlib import Path

from delaying_proxy import DelayingProxy

from loopdeck.core.events import ReviewVerdict, RunStarted
from loopdeck.store import leases, writer
from loopdeck.store.opening import open_store

sys.path.insert(0, str(Path(__file__).parent.parent / "tests"))
from pg_cluster import Cluster  # the tests' throwaway cluster

ROUNDS = 6
WORKER = leases.WorkerName("bench", os.getpid(), "pgcommits")


async def per_commit(url: str, pipelined: bool, commits: int) -> tuple[float, float]:
    """Wall and CPU a commit (us) of a fenced writer, each commit one event."""
    store = await open_store(url)
    kept = writer.PIPELINED_ROWS
    writer.PIPELINED_ROWS = kept if pipelined else 0  # 0: no batch is small enough
    try:
        run_id = f"r{time.time_ns()}"
        await leases.submit(store, run_id, {"run_id": run_id})
        claim = await leases.claim(store, WORKER, 300)
        assert claim is not None
        events = writer.EventWriter(store, fence=(run_id, claim.epoch))
        events(RunStarted(run_id=run_id, seq=1, env="e", script=None, model="m",
                          mode="rounds", goal="g", budget={}))  # fmt: skip
        await events.flush()
        start, cpu = time.perf_counter(), time.process_time()
        for seq in range(2, commits + 2):
            events(ReviewVerdict(run_id=run_id, seq=seq, round=1, verdict="fail", reasons=[],
                                 before_hash="a", after_hash="b"))  # fmt: skip
            await events.flush()
        wall, spent = time.perf_counter() - start, time.process_time() - cpu
        await events.close()
        return wall / commits * 1e6, spent / commits * 1e6
    finally:
        writer.PIPELINED_ROWS = kept
        await store.close()


async def compared(name: str, url: str, commits: int) -> None:
    figures: dict[bool, list[tuple[float, float]]] = {True: [], False: []}
    for round_ in range(ROUNDS):
        for pipelined in (round_ % 2 == 0, round_ % 2 != 0):
            figures[pipelined].append(await per_commit(url, pipelined, commits))
    for pipelined, measured in figures.items():
        wall = statistics.median(w for w, _ in measured)
        cpu = statistics.median(c for _, c in measured)
        how = "pipelined" if pipelined else "statement by statement"
        print(f"{name}: a commit {how}: {wall:,.0f} us wall, {cpu:,.0f} us of this process's CPU")


def main() -> None:
    commits = int(sys.argv[1]) if len(sys.argv) > 1 else 600
    cluster = Cluster().start()
    os.environ["PGPASSWORD"] = cluster.password
    try:
        asyncio.run(compared("loopback", cluster.bare_url, commits))
        with DelayingProxy(cluster.port, 0.001) as port:
            far = cluster.bare_url.replace(f":{cluster.port}/", f":{port}/")
            asyncio.run(compared("1 ms away each way", far, commits // 6))
    finally:
        cluster.stop()


if __name__ == "__main__":
    main()
