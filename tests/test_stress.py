"""Twenty runs on one store while another process keeps reading it (`make stress`).

Each run's goal check blocks for 8 s; `loopdeck runs` is polled every 0.5 s and marks any
run it believes dead. Nothing may be marked crashed, no event may be lost, and every run
ends with exactly one run_stopped.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import time

import pytest
from conftest import EDGES

RUNNERS = 20


@pytest.mark.slow
def test_twenty_blocking_runs_on_one_store_are_never_marked_crashed(tmp_path) -> None:
    db = tmp_path / "stress.db"
    runners = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "loopdeck",
                "run",
                str(EDGES),
                "--script",
                "block-check-8",
                "--headless",
                "--json",
                "--db",
                str(db),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(RUNNERS)
    ]
    polls, poll_failures = 0, []
    deadline = time.monotonic() + 900
    while any(r.poll() is None for r in runners):
        assert time.monotonic() < deadline, "runners did not finish"
        if db.exists():
            proc = subprocess.run(
                [sys.executable, "-m", "loopdeck", "runs", "--json", "--db", str(db)],
                capture_output=True, text=True, timeout=120, check=False,
            )  # fmt: skip
            polls += 1
            if proc.returncode != 0:
                poll_failures.append(proc.stderr)
        time.sleep(0.5)  # the polling rate the issue names, not a wait on the result
    outputs = [r.communicate() for r in runners]
    summaries = [json.loads(out.strip().splitlines()[-1]) for out, _ in outputs]

    con = sqlite3.connect(db)
    runs = con.execute("SELECT run_id, stop_reason FROM runs").fetchall()
    events = con.execute("SELECT run_id, seq, kind FROM events ORDER BY run_id, seq").fetchall()
    con.close()
    by_run: dict[str, list[tuple[int, str]]] = {}
    for run_id, seq, kind in events:
        by_run.setdefault(run_id, []).append((seq, kind))

    crashed = [run_id for run_id, reason in runs if reason == "crashed"]
    gaps = [
        run_id
        for run_id, rows in by_run.items()
        if [seq for seq, _ in rows] != list(range(1, len(rows) + 1))
    ]
    stops = {run_id: [k for _, k in rows].count("run_stopped") for run_id, rows in by_run.items()}
    print(
        f"stress: {RUNNERS} runs, {polls} polls of `loopdeck runs`, crashed {len(crashed)}, "
        f"runs with gaps {len(gaps)}, run_stopped counts {sorted(set(stops.values()))}"
    )
    assert len(runs) == RUNNERS
    assert crashed == []
    assert gaps == []
    assert set(stops.values()) == {1}
    assert [s["stop_reason"] for s in summaries] == ["goal_met"] * RUNNERS
    assert poll_failures == [], poll_failures[:3]
    assert polls > 0
