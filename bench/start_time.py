"""Start (issue 11, target 6): launch to first painted frame, next to Textual's hello world.

Both run in tmux at 160x48, timed from launch until their first frame is on the pane; median
of several launches each, alternating, in the same bench run.

    .venv/bin/python bench/start_time.py [RUNS]
"""

from __future__ import annotations

import shutil
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

from targets_table import Row, print_table

ROOT = Path(__file__).resolve().parents[1]
LOOPDECK = Path(sys.executable).with_name("loopdeck")
HELLO = Path(__file__).with_name("hello_world.py")


def first_frame(command: str, text: str) -> float:
    name = f"bench-{uuid.uuid4().hex[:6]}"
    start = time.perf_counter()
    subprocess.run(
        ["tmux", "new-session", "-d", "-s", name, "-x", "160", "-y", "48",
         f"env -u COLUMNS -u LINES {command}"],
        check=True,
    )  # fmt: skip
    try:
        while True:
            screen = subprocess.run(
                ["tmux", "capture-pane", "-p", "-t", name], capture_output=True, text=True
            ).stdout
            if text in screen:
                return time.perf_counter() - start
            if time.perf_counter() - start > 30:
                raise RuntimeError(f"no frame after 30 s:\n{screen}")
            time.sleep(0.005)
    finally:
        subprocess.run(["tmux", "kill-session", "-t", name], check=False)


def measure(runs: int = 5) -> list[Row]:
    if shutil.which("tmux") is None:
        print("tmux not found: the start figures need it")
        return []
    run = f"{LOOPDECK} run {ROOT / 'sample_envs' / 'order_support'} --script solve"
    hello = f"{sys.executable} {HELLO}"
    ours, theirs = [], []
    for _ in range(runs):
        theirs.append(first_frame(hello, "Hello, World!"))
        ours.append(first_frame(run, "Budgets"))
    mine, base = statistics.median(ours), statistics.median(theirs)
    print(
        f"first frame: loopdeck run {mine * 1000:.0f} ms, Textual's hello world {base * 1000:.0f}"
    )
    return [Row("6 first frame vs hello world", f"{mine * 1000:.0f} ms", f"{base * 1000:.0f} ms",
                mine / base, "<= 1.5x")]  # fmt: skip


if __name__ == "__main__":
    print_table(measure(int(sys.argv[1]) if len(sys.argv) > 1 else 5))
