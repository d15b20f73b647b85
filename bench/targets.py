"""Every performance target of issue 11 in one run: figure, reference, ratio, PASS/FAIL.

make bench      (installs the bench extra: pydantic-ai-slim, the peer loop)
"""

from __future__ import annotations

import asyncio

import console_load
import console_rss
import model_path
import start_time
import store_throughput
from targets_table import print_table


def main() -> None:
    rows = asyncio.run(model_path.measure())
    rows += asyncio.run(console_load.measure(20_000))
    rows += console_rss.measure(20_000)
    rows += asyncio.run(store_throughput.measure(100_000))
    rows += start_time.measure()
    rows.sort(key=lambda row: row.target)
    print_table(rows)


if __name__ == "__main__":
    main()
