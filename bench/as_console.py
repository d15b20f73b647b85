"""A bench's follower with the console's collector: the fleet screen a bench stands for runs in
the console's process, which `loopdeck.tuning.for_console` sets up (the collector's thresholds,
what is loaded frozen out of its walks). A follower left at Python's thresholds runs full
collections the console does not, and its lag measures them instead of the fleet's reads."""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

from loopdeck.tuning import collector


@contextlib.contextmanager
def console_collector() -> Iterator[None]:
    """The console's thresholds and what is loaded frozen, for the block; then as before."""
    kept = gc.get_threshold()
    gc.set_threshold(*collector.CONSOLE_THRESHOLDS)
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
        gc.set_threshold(*kept)
