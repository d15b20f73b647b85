"""The fleet keeping up (issue 10): one console following 100 live runs on one store.

A writer process appends events for 100 runs at about 1,000 events/s in all (batches every
10 ms, as runners commit), noting each batch's commit time. This process follows the store
the way the fleet screen does (`Fleet.refresh` every 100 ms: SQLite's change counter, then only
runs with new events) and notes when it first saw each run's newest event. Printed: the lag
from commit to seen (median and p99) and this process's CPU time and peak RSS.
Targets: p99 lag <= 250 ms, RSS <= 200 MB.

    .venv/bin/python bench/fleet_lag.py [SECONDS]
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import resource
import sqlite3
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from loopdeck.operator.fleet import Fleet
from loopdeck.store.opening import open_store

RUNS = 100
RATE = 1000  # events per second, all runs together
BATCH_EVERY_S = 0.01


def _usage(run_id: str, seq: int, at: str) -> str:
    """A `budget_updated` event's stored body, as a runner writes it (the fleet reads it back
    as its class)."""
    usage = {"tokens": [seq, 1_000_000], "turns": [seq // 100, 400], "deadline_s": [1, 300]}
    event = {"run_id": run_id, "seq": seq, "at": at, "kind": "budget_updated"}
    return json.dumps({**event, "usage": usage, "cost_unknown_calls": 0})


def writer(db: str, seconds: float, commits: str) -> None:
    conn = sqlite3.connect(db, isolation_level=None, timeout=10)
    conn.execute("PRAGMA journal_mode = WAL")
    now = datetime.now(UTC).isoformat()
    for i in range(RUNS):
        conn.execute(
            "INSERT INTO runs (run_id, env, script, model, state, started_at, pid, host,"
            " heartbeat_at) VALUES (?, 'bench', 'load', 'scripted', 'deciding', ?, 0,"
            " 'bench-host', ?)",
            (f"run{i:03d}", now, time.time()),
        )
    per_batch = max(1, int(RATE * BATCH_EVERY_S))
    seqs = [0] * RUNS
    log: list[tuple[str, int, float]] = []
    end = time.monotonic() + seconds
    k = 0
    while time.monotonic() < end:
        started = time.monotonic()
        conn.execute("BEGIN")
        touched = {}
        for _ in range(per_batch):
            run = k % RUNS
            k += 1
            seqs[run] += 1
            conn.execute(
                "INSERT INTO events (run_id, seq, kind, at, body) VALUES (?, ?, ?, ?, ?)",
                (
                    f"run{run:03d}",
                    seqs[run],
                    "budget_updated",
                    now,
                    _usage(f"run{run:03d}", seqs[run], now),
                ),
            )
            touched[f"run{run:03d}"] = seqs[run]
        # runners on another host beat a heartbeat: the follower must not think them gone
        conn.execute("UPDATE runs SET heartbeat_at = ?", (time.time(),))
        conn.execute("COMMIT")
        committed = time.time()
        log.extend((run_id, seq, committed) for run_id, seq in touched.items())
        time.sleep(max(0.0, BATCH_EVERY_S - (time.monotonic() - started)))
    for i in range(RUNS):
        conn.execute("UPDATE runs SET state = 'stopped' WHERE run_id = ?", (f"run{i:03d}",))
    Path(commits).write_text(json.dumps(log))


async def follow(db: Path, seconds: float) -> dict[tuple[str, int], float]:
    store = await open_store(db)
    fleet, seen = Fleet(), {}
    end = time.monotonic() + seconds
    try:
        while time.monotonic() < end:
            if await fleet.refresh(store):
                now = time.time()
                for row in fleet.rows.values():
                    seen.setdefault((row.run_id, row.seen_seq), now)
            await asyncio.sleep(0.1)
    finally:
        await store.close()
    return seen


async def create(db: Path) -> None:
    store = await open_store(db)  # the schema, as a runner would create it
    await store.close()


def main() -> None:
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 10.0
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "fleet.db"
        asyncio.run(create(db))
        commits = str(Path(tmp) / "commits.json")
        proc = multiprocessing.Process(target=writer, args=(str(db), seconds, commits))
        cpu0 = time.process_time()
        proc.start()
        seen = asyncio.run(follow(db, seconds + 1.0))
        proc.join()
        cpu = time.process_time() - cpu0
        log = json.loads(Path(commits).read_text())
    lags = sorted(seen[(r, s)] - t for r, s, t in log if (r, s) in seen)
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    median = statistics.median(lags) * 1000
    p99 = lags[int(len(lags) * 0.99) - 1] * 1000
    print(f"fleet following {RUNS} live runs at ~{RATE} events/s for {seconds:g} s")
    print(f"  newest events seen: {len(lags):,} of {len(log):,} committed (the rest superseded)")
    print(f"  lag commit → fleet: median {median:.0f} ms, p99 {p99:.0f} ms  target p99 <= 250 ms"
          f"  {'PASS' if p99 <= 250 else 'FAIL'}")  # fmt: skip
    print(
        f"  follower CPU {cpu:.2f} s over {seconds + 1:g} s ({cpu / (seconds + 1):.0%} of a core)"
    )
    print(
        f"  follower peak RSS {rss_mb:.0f} MB  target <= 200 MB  "
        f"{'PASS' if rss_mb <= 200 else 'FAIL'}"
    )


if __name__ == "__main__":
    main()
