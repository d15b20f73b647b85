"""The console's memory after following a 100,000-event run (issue 11, target 5).

A runner process records a runaway (20,000 calls of a zero-latency model: 100,000 events)
into a fresh store, headless, as `loopdeck run --headless --db` does. This process is the
operator's console attached to it (`loopdeck attach`): a StoreLink following the run at
160x48 until its stop is on screen. Printed: this process's peak RSS, and whether it ever
imported LiteLLM (a console that only follows does not need it; the runner does).

    .venv/bin/python bench/console_rss.py [CALLS]
"""

from __future__ import annotations

import asyncio
import resource
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path

from targets_table import Row, print_table

HERE = Path(__file__).parent


async def record(db: Path, calls: int) -> None:
    """The runner: a recorded runaway, the way a headless run with --db records it."""
    from console_load import runaway
    from steps_per_second import ZeroLatencyModel

    from loopdeck.store.opening import open_store
    from loopdeck.store.runner import RecordedRun
    from loopdeck.store.writer import EventWriter

    store = await open_store(db)
    try:
        runtime = runaway(calls, ZeroLatencyModel())
        await RecordedRun(store, runtime, EventWriter(store)).run()
    finally:
        await store.close()


def first_run_id(db: Path) -> str | None:
    if not db.exists():
        return None
    try:
        with sqlite3.connect(db, timeout=5) as conn:
            row = conn.execute("SELECT run_id FROM runs LIMIT 1").fetchone()
    except sqlite3.Error:  # the runner is still creating the schema
        return None
    return row[0] if row else None


async def follow(db: Path, calls: int) -> tuple[float, bool]:
    from loopdeck import tuning
    from loopdeck.operator.store_link import StoreLink
    from loopdeck.tui.app import ConsoleStart, LoopdeckApp
    from loopdeck.tui.run_screen import RunScreen

    runner = subprocess.Popen(
        [sys.executable, str(HERE / "console_rss.py"), "--record", str(db), str(calls)], cwd=HERE
    )
    try:
        while (run_id := first_run_id(db)) is None:
            if runner.poll() is not None:
                raise SystemExit(f"the runner exited {runner.returncode} before its run began")
            await asyncio.sleep(0.05)
        tuning.for_console()  # as `loopdeck attach` tunes the process
        app = LoopdeckApp(ConsoleStart.for_link(StoreLink(db, run_id)))
        async with app.run_test(size=(160, 48)) as pilot:
            screen = next(s for s in app.screen_stack if isinstance(s, RunScreen))
            while screen.view.stop_reason is None or screen.arrived:
                await asyncio.sleep(0.05)
            await pilot.pause()
    finally:
        runner.wait()
    return peak_rss_mb(), "litellm" in sys.modules


def peak_rss_mb() -> float:
    """This process's own peak RSS. Not getrusage's ru_maxrss: Linux carries that across
    exec, so a process started by a big parent (targets.py after the runaways) reports the
    parent's peak. /proc's VmHWM belongs to this process's memory alone."""
    status = Path("/proc/self/status")
    if status.exists():
        for line in status.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def measure(calls: int = 20_000) -> list[Row]:
    with tempfile.TemporaryDirectory() as folder:
        out = subprocess.run(
            [sys.executable, str(HERE / "console_rss.py"), "--follow", folder, str(calls)],
            capture_output=True, text=True, check=True, cwd=HERE,
        ).stdout.split()  # fmt: skip
    rss_mb, litellm = float(out[-2]), out[-1] == "True"
    print(
        f"console attached to a {calls * 5:,}-event run: peak RSS {rss_mb:.0f} MB"
        f" (LiteLLM imported by the console: {'yes' if litellm else 'no'})"
    )
    return [
        Row(f"5 console RSS, {calls * 5:,} events", f"{rss_mb:.0f} MB", "200 MB", rss_mb / 200,
            "<= 1x"),
    ]  # fmt: skip


if __name__ == "__main__":
    if sys.argv[1:2] == ["--record"]:
        asyncio.run(record(Path(sys.argv[2]), int(sys.argv[3])))
    elif sys.argv[1:2] == ["--follow"]:
        rss, imported = asyncio.run(follow(Path(sys.argv[2]) / "runs.db", int(sys.argv[3])))
        print(f"{rss:.0f} {imported}")
    else:
        print_table(measure(int(sys.argv[1]) if len(sys.argv) > 1 else 20_000))
