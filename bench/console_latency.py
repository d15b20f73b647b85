"""Console responsiveness: launch to first painted frame, and stop latency under a runaway.

1. Runs the real `loopdeck` binary in tmux (160x48) and times launch → first frame showing
   the run screen, median of several launches.
2. Runs the console headless (Textual's run_test) on a runaway: a zero-latency model calling
   an exempt polling tool with budgets out of reach. Once at least 5,000 calls ran, it presses
   `s` and times the press → the run's stop.

    .venv/bin/python bench/console_latency.py [CALLS]
"""

from __future__ import annotations

import asyncio
import shutil
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from steps_per_second import StepArgs, ZeroLatencyModel, runtime_for

from loopdeck.core import Environment, tool
from loopdeck.operator.approval_queue import ApprovalQueue
from loopdeck.operator.launch import PreparedRun
from loopdeck.tui.app import LoopdeckApp
from loopdeck.tui.run_screen import RunScreen

ROOT = Path(__file__).resolve().parents[1]
LOOPDECK = Path(sys.executable).with_name("loopdeck")


def first_frame_seconds(runs: int = 5) -> list[float]:
    times = []
    for _ in range(runs):
        name = f"bench-{uuid.uuid4().hex[:6]}"
        command = f"{LOOPDECK} run {ROOT / 'sample_envs' / 'order_support'} --script solve"
        start = time.perf_counter()
        subprocess.run(
            ["tmux", "new-session", "-d", "-s", name, "-x", "160", "-y", "48", command], check=True
        )
        try:
            while True:
                screen = subprocess.run(
                    ["tmux", "capture-pane", "-p", "-t", name], capture_output=True, text=True
                ).stdout
                if "Budgets" in screen and "State" in screen:
                    times.append(time.perf_counter() - start)
                    break
                if time.perf_counter() - start > 30:
                    raise RuntimeError(f"no frame after 30 s:\n{screen}")
                time.sleep(0.005)
        finally:
            subprocess.run(["tmux", "kill-session", "-t", name], check=False)
    return times


class PollingEnv(Environment):
    def snapshot(self) -> dict[str, Any]:
        return {"job": "running"}

    def unmet(self, snapshot: dict[str, Any]) -> list[str]:
        return ["job still running"]

    @tool(args=StepArgs, exempt=True)
    def step(self, args: StepArgs) -> dict[str, Any]:
        """Poll a job."""
        return {"status": "running"}


async def stop_latency(calls: int) -> tuple[float, float, int, float]:
    runtime = runtime_for(10**7, ZeroLatencyModel())
    runtime.env = PollingEnv(Path("."), {})
    runtime.tools = {spec.name: spec for spec in runtime.env.tools()}
    runtime.calls.guard.admit = lambda key, exempt=False: True  # type: ignore[method-assign]
    prepared = PreparedRun(env_dir=None, runtime=runtime, workdir=Path("/nonexistent"))  # type: ignore[arg-type]
    app = LoopdeckApp(prepared, ApprovalQueue())
    async with app.run_test(size=(160, 48)) as pilot:
        screen = next(s for s in app.screen_stack if isinstance(s, RunScreen))
        started = time.perf_counter()
        while runtime.ledger.tool_calls < calls:
            if screen.outcome is not None:
                raise RuntimeError(f"the runaway stopped by itself: {screen.outcome.detail}")
            await pilot.pause(0.05)
        rate = runtime.ledger.tool_calls / (time.perf_counter() - started)
        stopped_at: list[float] = []
        runtime.bus.subscribe(
            lambda e: stopped_at.append(time.perf_counter()) if e.kind == "run_stopped" else None  # type: ignore[attr-defined]
        )
        pressed = time.perf_counter()
        await pilot.press("s")
        while screen.outcome is None:
            await pilot.pause(0.001)
        shown = time.perf_counter() - pressed
        return stopped_at[0] - pressed, shown, runtime.ledger.tool_calls, rate


def main() -> None:
    calls = int(sys.argv[1]) if len(sys.argv) > 1 else 5000
    if shutil.which("tmux"):
        frames = first_frame_seconds()
        print(
            f"launch → first painted frame (real binary, tmux 160x48): "
            f"median {statistics.median(frames) * 1000:.0f} ms "
            f"(min {min(frames) * 1000:.0f}, max {max(frames) * 1000:.0f}, n={len(frames)})"
        )
    else:
        print("tmux not found: skipping the first-frame measurement")
    stopped, shown, total, rate = asyncio.run(stop_latency(calls))
    print(
        f"runaway: {total} calls at {rate:.0f} calls/s with the console open; 's' pressed → "
        f"run stopped in {stopped * 1000:.1f} ms, stop on screen in {shown * 1000:.1f} ms"
    )


if __name__ == "__main__":
    main()
