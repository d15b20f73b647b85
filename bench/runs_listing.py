"""`loopdeck runs` at 1,000 runs (issue 43): the table and `--json`, each a fresh process as
an operator types it (`python -m loopdeck runs --db FILE`), its wall time from start to exit.

The store (SQLite, in a temporary folder): 1,000 ended runs with budgets spent, one in ten
with a write whose outcome is unknown, 20 live runs of this process with a write waiting, and
submitted runs in the `leases` table (10 queued, 5 parked), so every column and every kind of
row is there. Target: each <= 0.3 s (the best of REPEATS: the machine's other load is not
the listing's). Printed beside it: the same command on an empty store, what does not grow
with the number of runs (the interpreter, the imports, opening the store).

    .venv/bin/python bench/runs_listing.py [RUNS]
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from targets_table import Row, print_table

from loopdeck.store.liveness import this_host
from loopdeck.store.opening import open_store

TARGET_S = 0.3
REPEATS = 5
LIVE, QUEUED, PARKED = 20, 10, 5


async def build(db: Path, runs: int, submitted: bool = True) -> None:
    """The store described above, written in one transaction (`submitted`: with the runs
    in the leases table)."""
    store = await open_store(db)
    start = datetime.now(UTC) - timedelta(days=30)
    try:
        async with store.transaction() as tx:
            for i in range(runs):
                run_id = f"{i:012x}"
                live = i >= runs - LIVE
                await tx.execute(
                    "INSERT INTO runs (run_id, env, script, model, mode, goal, state,"
                    " stop_reason, started_at, ended_at, tokens, cost_usd, pid, host,"
                    " heartbeat_at, paused) VALUES (?, 'order_support', 'wrong-guess',"
                    " 'openai/gpt-4o-mini', 'rounds', 'g', ?, ?, ?, ?, ?, ?, ?, ?, ?, 0)",
                    (run_id, "awaiting_approval" if live else "stopped",
                     None if live else "goal_met", (start + timedelta(minutes=i)).isoformat(),
                     None if live else (start + timedelta(minutes=i, seconds=40)).isoformat(),
                     1000 + i * 7, 0.001 * i, os.getpid() if live else 4242, this_host(),
                     time.time()),
                )  # fmt: skip
                if live or i % 10 == 0:
                    now = datetime.now(UTC)
                    await tx.execute(
                        "INSERT INTO approvals (run_id, call_id, tool, args, requested_at,"
                        " expires_at, state, outcome) VALUES (?, ?, 'refund', ?, ?, ?, ?, ?)",
                        (run_id, f"call_{i}", '{"order_id": "ORD-1042", "amount": 10}',
                         now.isoformat(), (now + timedelta(hours=1)).isoformat(),
                         "pending" if live else "approved",
                         None if live else "outcome_unknown"),
                    )  # fmt: skip
            options = json.dumps({"env": "order_support", "script": "solve", "model": "scripted"})
            for i in range(QUEUED + PARKED if submitted else 0):
                run_id = f"q{i:011x}"
                parked = i >= QUEUED
                if parked:  # claimed once: its run's row is there, waiting on its operator
                    await tx.execute(
                        "INSERT INTO runs (run_id, env, script, model, mode, goal, state,"
                        " started_at, pid, host, heartbeat_at) VALUES (?, 'order_support',"
                        " 'solve', 'scripted', 'rounds', 'g', 'awaiting_approval', ?, 4242,"
                        " 'worker-b', ?)",
                        (run_id, datetime.now(UTC).isoformat(), time.time()),
                    )
                await tx.execute(
                    "INSERT INTO leases (run_id, options, state, epoch, host, submitted_at,"
                    " note) VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (run_id, options, "parked" if parked else "queued", 1 if parked else 0,
                     "worker-b" if parked else None, time.time(),
                     "parked" if parked else "queued"),
                )  # fmt: skip
    finally:
        await store.close()


def timed(db: Path, *flags: str, listed: str = "000000000000") -> float:
    """The best wall time of REPEATS runs of `loopdeck runs`, checked to have listed."""
    env = {**os.environ, "COLUMNS": "160"}
    best = float("inf")
    for _ in range(REPEATS):
        start = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-m", "loopdeck", "runs", "--db", str(db), *flags],
            capture_output=True, text=True, env=env, check=True,
        )  # fmt: skip
        best = min(best, time.perf_counter() - start)
        assert listed in done.stdout, done.stdout[-400:]
    return best


def measure(runs: int = 1000) -> list[Row]:
    with tempfile.TemporaryDirectory() as folder:
        db, empty = Path(folder) / "runs.db", Path(folder) / "empty.db"
        asyncio.run(build(db, runs))
        asyncio.run(build(empty, 0, submitted=False))
        table, as_json = timed(db), timed(db, "--json")
        fixed = timed(empty, "--json", listed="[")
    # What does not grow with the runs: the interpreter, the imports, the store's opening.
    print(f"loopdeck runs on an empty store (its fixed cost): {fixed:.2f} s")
    return [
        Row(f"loopdeck runs, {runs:,} runs (table)", f"{table:.2f} s", f"{TARGET_S} s",
            table / TARGET_S, "<= 1x"),
        Row(f"loopdeck runs --json, {runs:,} runs", f"{as_json:.2f} s", f"{TARGET_S} s",
            as_json / TARGET_S, "<= 1x"),
    ]  # fmt: skip


if __name__ == "__main__":
    print_table(measure(int(sys.argv[1]) if len(sys.argv) > 1 else 1000))
