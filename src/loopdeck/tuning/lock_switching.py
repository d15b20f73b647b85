"""The console's terms for sharing the interpreter's lock between its loop and other threads.

**How long a holder keeps it.** A thread waiting for the lock lets the holder run for the
switch interval before it asks. Python's default is 5 ms. In a console that is too short:
LiteLLM's thread pool builds each request in pure Python (5-6 ms at 4,000 messages), and a
frame's paint takes 5-6 ms of the lock too. At 5 ms each cut into the other, and a paint that
needed 6 ms of the lock took up to 15 ms on the clock, the loop's longest stalls. At 10 ms both
usually finish what they hold it for. A thread that gives the lock up by itself (a wait, I/O:
env code that sleeps, the store's inserts, a provider's HTTP request) hands it over at once.

The cost falls on pure-Python env code that never waits: while it runs, the loop gets the lock
every 10 ms instead of every 5. Measured in `bench/console_load.py` and ARCHITECTURE.md
("Where model calls run"): the LiteLLM runaway's longest stall 23 -> 17.5 ms (medians), a tool
spinning for a second 13 -> 21 ms, keys answered within 7-18 ms either way.

**Who goes first.** A console's runs run on a thread of their own (`operator.run_loop`): while
the console's loop is awake, that thread's loop waits at the start of its turn
(`console_first`), so a frame holds the lock in one piece; the switch interval only bounds how
long a wake of the console's loop waits for a turn of the run already going (A/B with it in,
bench/console_load.py: 5 ms did no better than 10).

**Who gives way.** The 10 ms cut both ways: a loop callback that found the pool building a
request waited up to 10 ms for the lock before its own work began. So the pool gives way: each
walk over a long conversation made there (`give_way`: LiteLLM's message validation, in
`llm.litellm_passes`, and the offline model's token count) first lets the lock go for a moment,
long enough for a loop waiting on another core to wake and take it. The loop then waits for
at most what is left of one pass, not of the whole request. Headless, nobody waits for the
lock, and nothing gives way.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Sized

CONSOLE_SWITCH_INTERVAL_S = 0.01
# Below this many messages a pass takes less of the lock (~0.5 ms) than giving way costs.
GIVE_WAY_FROM = 1_000
# A wake on another core takes 20-50 us on these machines; Linux adds up to 50 us of slack.
GIVE_WAY_S = 0.00005

_console_thread: int | None = None


def for_console() -> None:
    """The console's terms, for the thread that runs its loop. The console owns its process, as
    it owns the collector's thresholds; a headless run or an embedder's process keeps its own."""
    global _console_thread
    sys.setswitchinterval(CONSOLE_SWITCH_INTERVAL_S)
    _console_thread = threading.get_ident()


def headless() -> None:
    """Back to a process without a console (for tests): Python's interval, nobody gives way."""
    global _console_thread
    sys.setswitchinterval(0.005)
    _console_thread = None


def console_thread() -> int | None:
    """The thread running the console's loop, if a console set its terms."""
    return _console_thread


def give_way(conversation: Sized) -> bool:
    """Before a pass over `conversation`: off the console's loop thread, with a console open
    and a long conversation, let the interpreter's lock go for a moment. True if it did."""
    console = _console_thread
    if console is None or len(conversation) < GIVE_WAY_FROM or threading.get_ident() == console:
        return False
    time.sleep(GIVE_WAY_S)
    return True
