"""The fleet's refresh by what changed (issue 43): `FleetScreen.render_fleet` per refresh at
100, 1,000 and 3,000 runs, headless at 160x48, as the console does it between two reads of
the store: a few runs changed (their last event, their budget, one a state), the order, the
table's lines on screen and the header made again.

The fleet's rows are put in as the feed would (`Fleet.rows`, each change said to the fleet
as `_take` says it); the store is an empty SQLite file (the screen follows it, nothing comes).
Each size measured in the same process, the median of REFRESHES refreshes after a warm-up.
Target: flat, the cost at 3,000 runs at most 1.5x the cost at 100 (it was 0.7, 3.0 and
7.3-13.1 ms: 10-19x).

    .venv/bin/python bench/fleet_render.py [--profile]
"""

from __future__ import annotations

import asyncio
import cProfile
import pstats
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from targets_table import Row, print_table
from textual.app import App

from loopdeck.operator.fleet import FleetRow
from loopdeck.tui.fleet_screen import FleetScreen
from loopdeck.tui.shared_state import SharedState

SIZES = (100, 1_000, 3_000)
CHANGED = 5  # runs changed between two refreshes (a busy fleet at ~42 refreshes/s)
REFRESHES = 400
GOAL = 1.5  # the cost at 3,000 over the cost at 100
NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _row(i: int) -> FleetRow:
    waiting = i % 97 == 0
    return FleetRow(
        run_id=f"run{i:05d}", env=f"env{i % 7}", script="solve", model="scripted",
        state="awaiting_approval" if waiting else ("deciding" if i % 3 else "stopped"),
        stop_reason=None if i % 3 or waiting else "goal_met",
        started_at=NOW - timedelta(seconds=i), pending=int(waiting),
        runner=f"host{i % 10}:{1000 + i}", seen_seq=i,
    )  # fmt: skip


class Bench(App[None]):
    def __init__(self, db: Path) -> None:
        super().__init__()
        self.db = db

    def on_mount(self) -> None:
        self.push_screen(FleetScreen(self.db, lambda: NOW, SharedState(), bell=False))


def _change(screen: FleetScreen, step: int, size: int) -> None:
    """CHANGED runs spread over the fleet move on; now and then one changes its state."""
    for k in range(CHANGED):
        run_id = f"run{(step * 7919 + k * 131) % size:05d}"
        row = screen.fleet.rows[run_id]
        row.seen_seq += 1
        row.last_finding = f"step {row.seen_seq}"
        if k == 0 and step % 10 == 0 and row.live:
            row.state = "acting" if row.state == "deciding" else "deciding"
        screen.fleet.touch(run_id)


async def _per_refresh_ms(size: int, profile: cProfile.Profile | None) -> float:
    with tempfile.TemporaryDirectory() as folder:
        app = Bench(Path(folder) / "fleet.db")
        async with app.run_test(size=(160, 48)) as pilot:
            while not isinstance(app.screen, FleetScreen) or app.screen.fleet.counter == -1:
                await pilot.pause(0.01)
            screen = app.screen
            screen.fleet.rows = {row.run_id: row for row in map(_row, range(size))}
            screen.render_fleet()
            await pilot.pause()
            taken = []
            for step in range(REFRESHES + 50):
                _change(screen, step, size)
                if profile is not None and step >= 50:
                    profile.enable()
                began = time.perf_counter()
                screen.render_fleet()
                screen.check_alerts()
                spent = time.perf_counter() - began
                if profile is not None:
                    profile.disable()
                if step >= 50:
                    taken.append(spent * 1000)
                if step % 20 == 0:
                    await pilot.pause()  # a frame now and then: the lines on screen drawn
            return statistics.median(taken)


def measure(profile: bool = False) -> list[Row]:
    figures = {}
    for size in SIZES:
        profiler = cProfile.Profile() if profile and size == SIZES[-1] else None
        figures[size] = asyncio.run(_per_refresh_ms(size, profiler))
        if profiler is not None:
            pstats.Stats(profiler).sort_stats("cumulative").print_stats(25)
    print("render_fleet (and its alerts) per refresh, median of", REFRESHES, "refreshes:")
    for size, ms in figures.items():
        print(f"  {size:>5,} runs: {ms:.3f} ms")
    rows = [
        Row(f"fleet: render_fleet per refresh at {size:,} runs vs 100",
            f"{figures[size]:.2f} ms", f"{figures[SIZES[0]]:.2f} ms",
            figures[size] / figures[SIZES[0]], f"<= {GOAL}x")
        for size in SIZES[1:]
    ]  # fmt: skip
    return rows


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    print_table(measure(profile="--profile" in args))


if __name__ == "__main__":
    main()
