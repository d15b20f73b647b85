"""A fleet of a thousand (issue 30): one console following 1,000 live runs on PostgreSQL.

A throwaway PostgreSQL cluster; `fleet_writers.start_writers` records 1,000 runs from 10
writer processes (a host each, the real EventWriter, ~1,000 events/s in all). This process is
the console: `LoopdeckApp` on the fleet, headless at 160x48 (`App.run_test`), following the
store as `loopdeck console --db URL` does. Once the fleet lists every run, for SECONDS:

(a) lag from a batch's commit (the writer's `time.time()` right after its transaction) to
    - the table: the first `FleetTable.show` whose row for that run has `seen_seq` at or
      past the batch's last event (every run, on screen or not);
    - the screen: the first `FleetTable.render_line` that draws that run's row with such a
      `seen_seq` (the ~40 runs on screen), or the `show` that found its line already drawn
      as it looks now (only changed lines are drawn again);
(b) this process's peak RSS (the console; the writers and the server are other processes);
(c) a key's answer: `down` or `up` sent as the terminal would (through the driver), every
    0.25 s, timed to the `render_line` that draws the cursor on its new row.

Printed with PASS/FAIL: p99 lag <= 250 ms, RSS <= 200 MB, p99 key <= 50 ms; and, measured
first (`fleet_render.py`), `render_fleet` per refresh at 100, 1,000 and 3,000 runs as target
lines (flat: 3,000 at most 1.5x 100). The hooks add a
pass over the rows to each `show` (bench only). On a loaded machine the figures are
provisional.

    .venv/bin/python bench/fleet_console.py [SECONDS] [HOSTS] [RUNS_EACH]
"""

from __future__ import annotations

import asyncio
import bisect
import os
import resource
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from fleet_render import measure as render_costs
from fleet_writers import start_writers
from targets_table import print_table
from textual import events

from loopdeck.operator.fleet import Fleet, FleetRow
from loopdeck.tui.app import ConsoleStart, LoopdeckApp
from loopdeck.tui.fleet_screen import FleetScreen
from loopdeck.tui.fleet_table import FleetTable

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

from pg_cluster import Cluster  # noqa: E402  (the tests' throwaway cluster)

SIZE = (160, 48)
KEY_EVERY_S = 0.25
SETUP_S = 300.0  # the writers' runs started and the fleet listing all of them
# In a fleet the writers are on hosts of their own; here they share the console's cores, so
# they yield to it (LOOPDECK_BENCH_NICE=0: they compete as equals).
NICE_WRITERS = int(os.environ.get("LOOPDECK_BENCH_NICE", "10"))


class Watch:
    """What the table knew and drew, and when; the key being timed."""

    def __init__(self) -> None:
        self.known: dict[str, list[tuple[int, float]]] = defaultdict(list)
        self.drawn: dict[str, list[tuple[int, float]]] = defaultdict(list)
        self.key_sent = 0.0
        self.key_moved: bool | None = None  # False: sent, True: the cursor moved
        self.key_answered = asyncio.Event()
        self.key_ms: list[float] = []
        self.busy: dict[str, float] = defaultdict(float)  # seconds spent, by where
        self.calls: dict[str, int] = defaultdict(int)

    def timed(self, cls: Any, name: str, label: str) -> None:
        """Adds up the wall time of `cls.name` (async or not) under `label`."""
        original, busy, calls = getattr(cls, name), self.busy, self.calls

        if asyncio.iscoroutinefunction(original):

            async def waited(*args: Any, **kwargs: Any) -> Any:
                start = time.perf_counter()
                try:
                    return await original(*args, **kwargs)
                finally:
                    busy[label] += time.perf_counter() - start
                    calls[label] += 1

            setattr(cls, name, waited)
            return

        def spent(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                busy[label] += time.perf_counter() - start
                calls[label] += 1

        setattr(cls, name, spent)

    def hook(self) -> None:
        self.timed(Fleet, "refresh", "the fleet's store reads (awaits included)")
        self.timed(FleetScreen, "render_fleet", "render_fleet (order, filter, header)")
        self.timed(FleetScreen, "check_alerts", "alerts")
        self.timed(FleetTable, "render_lines", "the table's paints")
        show, render_line, cursor = (
            FleetTable.show,
            FleetTable.render_line,
            FleetTable.action_cursor,
        )
        watch = self

        def moved(table: FleetTable, delta: int) -> None:
            cursor(table, delta)
            if watch.key_moved is False:
                watch.key_moved = True

        def shown(table: FleetTable, rows: list[FleetRow], now: Any) -> None:
            show(table, rows, now)
            at = time.time()
            for row in rows:
                noted = watch.known[row.run_id]
                if not noted or noted[-1][0] < row.seen_seq:
                    noted.append((row.seen_seq, at))
            # A row on screen that looks as it was drawn needs no drawing: it is current.
            top = int(table.scroll_y)
            for index in range(top, min(len(rows), top + table.rows_shown)):
                row = rows[index]
                noted = watch.drawn[row.run_id]
                if table.drawn_as_now(index) and (not noted or noted[-1][0] < row.seen_seq):
                    noted.append((row.seen_seq, at))

        def drawn(table: FleetTable, y: int) -> Any:
            strip = render_line(table, y)
            index = int(table.scroll_offset.y) + y - 1
            if 0 <= index < table.row_count:
                row = table.row_at(index)
                noted = watch.drawn[row.run_id]
                if not noted or noted[-1][0] < row.seen_seq:
                    noted.append((row.seen_seq, time.time()))
                if watch.key_moved and index == table.cursor_row:
                    watch.key_ms.append((time.perf_counter() - watch.key_sent) * 1000)
                    watch.key_moved = None
                    watch.key_answered.set()
            return strip

        FleetTable.show = shown  # type: ignore[method-assign]
        FleetTable.render_line = drawn  # type: ignore[method-assign]
        FleetTable.action_cursor = moved  # type: ignore[method-assign]


def lags_ms(commits: list[tuple[str, int, float]], seen: dict[str, list[tuple[int, float]]],
            since: float) -> tuple[list[float], int]:  # fmt: skip
    """Per commit after `since`: the first sight at or past its last event; and how many
    commits of runs in `seen` were never seen."""
    lags, missed = [], 0
    for run_id, seq, at in commits:
        noted = seen.get(run_id)
        if at < since or not noted:
            continue
        i = bisect.bisect_left(noted, (seq, 0.0))
        if i == len(noted):
            missed += 1
        else:
            lags.append(max(0.0, noted[i][1] - at) * 1000)
    return sorted(lags), missed


def percentile(values: list[float], p: float) -> float:
    return values[min(len(values) - 1, int(len(values) * p))] if values else float("nan")


async def press_keys(app: LoopdeckApp, table: FleetTable, watch: Watch, until: float) -> None:
    """Down to the 20th row, then up to the first, and again: the cursor stays on screen."""
    step = 1
    while time.monotonic() < until:
        await asyncio.sleep(KEY_EVERY_S)
        if not 0 <= table.cursor_row + step < min(20, table.row_count):
            step = -step
        watch.key_moved = False
        watch.key_answered.clear()
        key = events.Key("down" if step > 0 else "up", None)
        key.set_sender(app)
        watch.key_sent = time.perf_counter()
        # The key comes the way a terminal's does, through the driver: Textual has no public
        # way to send it there (`App.post_message` would skip the hop a keypress makes).
        assert app._driver is not None
        app._driver.send_message(key)
        try:
            await asyncio.wait_for(watch.key_answered.wait(), 5.0)
        except TimeoutError:
            watch.key_ms.append(5000.0)


async def console(url: str, runs: int, seconds: float, watch: Watch) -> tuple[float, float]:
    """The console until the writers are done; returns when measuring started and ended."""
    app = LoopdeckApp(ConsoleStart.for_fleet(url))
    async with app.run_test(size=SIZE) as pilot:
        end = time.monotonic() + SETUP_S
        while not (isinstance(app.screen, FleetScreen) and len(app.screen.fleet.rows) >= runs):
            listed = len(app.screen.fleet.rows) if isinstance(app.screen, FleetScreen) else 0
            assert time.monotonic() < end, f"the fleet listed {listed} of {runs} runs in time"
            await pilot.pause(0.1)
        table = app.screen.query_one(FleetTable)
        since = time.time() + 1.0
        await asyncio.sleep(1.0)
        watch.busy.clear()
        watch.calls.clear()
        cpu = time.process_time()
        await press_keys(app, table, watch, time.monotonic() + seconds)
        watch.busy["the console's CPU (all of it)"] = time.process_time() - cpu
        return since, time.time()


async def create(url: str) -> None:
    from loopdeck.store.opening import open_store

    store = await open_store(url)
    await store.close()


def main() -> None:
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 20.0
    hosts = int(sys.argv[2]) if len(sys.argv) > 2 else 10
    runs_each = int(sys.argv[3]) if len(sys.argv) > 3 else 100
    runs = hosts * runs_each
    costs = render_costs()  # before the hooks: `render_fleet` by fleet size, as it is
    cluster = Cluster().start()
    writers = None
    try:
        os.environ["PGPASSWORD"] = cluster.password
        url = cluster.bare_url
        asyncio.run(create(url))
        watch = Watch()
        watch.hook()
        # The writers' setup (runs started) is before their SECONDS: give them the console's.
        writers = start_writers(url, hosts=hosts, runs_each=runs_each, seconds=seconds + 60)
        if NICE_WRITERS:
            for proc in writers.processes:
                os.setpriority(os.PRIO_PROCESS, proc.pid, NICE_WRITERS)
        since, until = asyncio.run(console(url, runs, seconds, watch))
        commits = [entry for log in writers.wait(timeout_s=SETUP_S) for entry in log]
        writers = None
    finally:
        if writers is not None:
            writers.stop()
        cluster.stop()
    commits = [entry for entry in commits if entry[2] <= until - 1.0]
    report(runs, seconds, commits, watch, since)
    print_table(costs)


def report(runs: int, seconds: float, commits: list[Any], watch: Watch, since: float) -> None:
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    known, missed = lags_ms(commits, watch.known, since)
    drawn, _ = lags_ms(commits, watch.drawn, since)
    keys = sorted(watch.key_ms)
    print(
        f"console following {runs} live runs on PostgreSQL for {seconds:g} s, {SIZE[0]}x{SIZE[1]}"
        f" (writers at nice {NICE_WRITERS}; load average {os.getloadavg()[0]:.1f} on"
        f" {os.cpu_count()} cores: figures on a loaded machine are provisional)"
    )
    print(
        f"  commits measured: {len(known):,}, {len(known) / seconds:.0f}/s"
        f" ({missed} never seen by the table)"
    )

    def line(what: str, values: list[float], target: float) -> None:
        if not values:
            print(f"  {what}: no sample  target p99 <= {target:g} ms  FAIL")
            return
        p50, p99 = statistics.median(values), percentile(values, 0.99)
        verdict = "PASS" if p99 <= target else "FAIL"
        print(
            f"  {what}: p50 {p50:.0f} ms, p99 {p99:.0f} ms  target p99 <= {target:g} ms  {verdict}"
        )

    line("lag commit → table (every run)", known, 250)
    line(f"lag commit → screen ({len(drawn):,} commits of runs on screen)", drawn, 250)
    line(f"key answer ({len(keys)} presses of up/down)", keys, 50)
    verdict = "PASS" if rss_mb <= 200 else "FAIL"
    print(f"  console peak RSS {rss_mb:.0f} MB  target <= 200 MB  {verdict}")
    print("  where the console's time went, per second measured:")
    for label, spent in watch.busy.items():
        calls = watch.calls.get(label)
        each = (
            f" ({calls / seconds:.0f} calls/s, {spent / calls * 1000:.1f} ms each)" if calls else ""
        )
        print(f"    {label}: {spent / seconds * 1000:.0f} ms/s{each}")


if __name__ == "__main__":
    main()
