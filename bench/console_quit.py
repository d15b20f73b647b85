"""Quitting and honest time (issue 9): how long `q` takes, and what a headless run charges.

1. Runs the real `loopdeck` binary in tmux (160x48) on order_support, waits for the approval,
   presses `q` then `y`, and times `y` → the shell prompt's `EXITED` line (median of several).
   Target: under 1 s. The farewell line it prints is shown.
2. Runs `loopdeck run service_outage --script solve --json` headless and prints `elapsed_s`
   (the agent's own time: LiteLLM's import is not charged) next to the process's wall time.
   Target: elapsed_s under 1 s.

    .venv/bin/python bench/console_quit.py [RUNS]
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LOOPDECK = Path(sys.executable).with_name("loopdeck")


def _screen(name: str) -> str:
    return subprocess.run(
        ["tmux", "-L", name, "capture-pane", "-p", "-t", name], capture_output=True, text=True
    ).stdout


def _wait(name: str, text: str, timeout: float = 60.0) -> str:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        screen = _screen(name)
        if text in screen:
            return screen
        time.sleep(0.01)
    raise SystemExit(f"{text!r} never appeared:\n{_screen(name)}")


def quit_seconds(db: Path) -> tuple[float, str]:
    name = f"bench-{uuid.uuid4().hex[:6]}"
    env = ROOT / "sample_envs" / "order_support"
    command = f"env -u COLUMNS -u LINES {LOOPDECK} run {env} --script solve --db {db}"
    subprocess.run(
        ["tmux", "-L", name, "new-session", "-d", "-s", name, "-x", "160", "-y", "48",
         f"{command}; echo EXITED $?; sleep 30"],
        check=True,
    )  # fmt: skip
    try:
        _wait(name, "Approve this write?")
        subprocess.run(["tmux", "-L", name, "send-keys", "-t", name, "q"], check=True)
        _wait(name, "Quit and kill")
        start = time.monotonic()
        subprocess.run(["tmux", "-L", name, "send-keys", "-t", name, "y"], check=True)
        screen = _wait(name, "EXITED")
        took = time.monotonic() - start
        farewell = next((line for line in screen.splitlines() if line.startswith("run ")), "")
        return took, farewell
    finally:
        subprocess.run(["tmux", "-L", name, "kill-server"], check=False)
        tmp = Path(os.environ.get("TMUX_TMPDIR", "/tmp"))
        (tmp / f"tmux-{os.getuid()}" / name).unlink(missing_ok=True)  # its socket


def headless_elapsed(db: Path) -> tuple[float, float]:
    start = time.monotonic()
    proc = subprocess.run(
        [
            str(LOOPDECK),
            "run",
            str(ROOT / "sample_envs" / "service_outage"),
            "--script",
            "solve",
            "--json",
            "--db",
            str(db),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    wall = time.monotonic() - start
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    return float(summary["elapsed_s"]), wall


def main() -> None:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "bench.db"
        if shutil.which("tmux"):
            results = [quit_seconds(db) for _ in range(runs)]
            took = statistics.median(t for t, _ in results)
            verdict = "PASS" if took < 1.0 else "FAIL"
            print(
                f"quit (y → process gone), median of {runs}: {took:.3f} s  target < 1 s  {verdict}"
            )
            print(f"  it printed: {results[-1][1]}")
        else:
            print("quit: tmux not installed, not measured")
        elapsed, wall = headless_elapsed(db)
        verdict = "PASS" if elapsed < 1.0 else "FAIL"
        print(
            f"headless service_outage solve: elapsed_s {elapsed:.3f} (process wall {wall:.2f} s, "
            f"LiteLLM's import not charged)  target < 1 s  {verdict}"
        )


if __name__ == "__main__":
    main()
