"""Every performance target of issue 11 in one run: figure, reference, ratio, PASS/FAIL; and
the gateway's added latency per call (issue 39, `gateway_latency.py`).

make bench      (installs the bench extra: pydantic-ai-slim, the peer loop)

Each group of targets is measured in a fresh process of its own (this file again, with the
group's name): what one measurement leaves behind (a heap for the collector to walk, its
thresholds, LiteLLM's caches) is not the next one's. A figure and its reference are always
measured side by side in the same process.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from targets_table import Row, print_table


def _model_path() -> list[Row]:
    import model_path

    return asyncio.run(model_path.measure())


def _console_load() -> list[Row]:
    import console_load

    return asyncio.run(console_load.measure(20_000))


def _console_rss() -> list[Row]:
    import console_rss

    return console_rss.measure(20_000)


def _store() -> list[Row]:
    import store_throughput

    return asyncio.run(store_throughput.measure(100_000))


def _start() -> list[Row]:
    import start_time

    return start_time.measure()


def _mcp() -> list[Row]:
    import mcp_overhead

    return asyncio.run(mcp_overhead.measure(640))


def _log_chain() -> list[Row]:
    import log_chain

    return asyncio.run(log_chain.measure())


def _gateway() -> list[Row]:
    import gateway_latency

    return gateway_latency.measure()


def _fleet_render() -> list[Row]:
    import fleet_render

    return fleet_render.measure()


def _workers() -> list[Row]:
    import workers

    return workers.measure()


def _runs_listing() -> list[Row]:
    import runs_listing

    return runs_listing.measure(1000)


GROUPS: dict[str, Callable[[], list[Row]]] = {
    "model_path": _model_path,
    "console_load": _console_load,
    "console_rss": _console_rss,
    "store": _store,
    "start": _start,
    "mcp": _mcp,
    "log_chain": _log_chain,
    "gateway": _gateway,
    "fleet_render": _fleet_render,
    "workers": _workers,
    "runs_listing": _runs_listing,
}
MARK = "ROWS "


def measure_group(name: str) -> list[Row]:
    here = Path(__file__).parent
    done = subprocess.run(
        [sys.executable, str(here / "targets.py"), name], stdout=subprocess.PIPE, text=True,
        check=True, cwd=here,
    )  # fmt: skip
    for line in done.stdout.splitlines():
        if line.startswith(MARK):
            return [Row(**row) for row in json.loads(line[len(MARK) :])]
        print(line)
    raise SystemExit(f"{name}: no figures")


def main() -> None:
    if len(sys.argv) > 1:
        rows = GROUPS[sys.argv[1]]()
        print(MARK + json.dumps([dataclasses.asdict(row) for row in rows]))
        return
    rows = [row for name in GROUPS for row in measure_group(name)]
    rows.sort(key=lambda row: row.target)
    print_table(rows)


if __name__ == "__main__":
    main()
