"""How long a thread waiting for the interpreter's lock lets the holder run before it asks.

Python's default is 5 ms. In a console that is too short: LiteLLM's thread pool builds each
request in pure Python (5-6 ms at 4,000 messages), and a frame's paint takes 5-6 ms of the
lock too. At 5 ms each cut into the other, and a paint that needed 6 ms of the lock took up to
15 ms on the clock, the loop's longest stalls. At 10 ms both usually finish what they hold it
for. A thread that gives the lock up by itself (a wait, I/O: env code that sleeps, the store's
inserts, a provider's HTTP request) hands it over at once, as before.

The cost falls on pure-Python env code that never waits: while it runs, the loop gets the lock
every 10 ms instead of every 5. Measured in `bench/console_load.py` and ARCHITECTURE.md
("Where model calls run"): the LiteLLM runaway's longest stall 23 -> 17.5 ms (medians), a tool
spinning for a second 13 -> 21 ms, keys answered within 7-18 ms either way.
"""

from __future__ import annotations

import sys

CONSOLE_SWITCH_INTERVAL_S = 0.01


def for_console() -> None:
    """The console's interval. The console owns its process, as it owns the collector's
    thresholds; a headless run or an embedder's process keeps its own."""
    sys.setswitchinterval(CONSOLE_SWITCH_INTERVAL_S)
