"""A console's reader of a whole store (the fleet, the approvals inbox): the store opened,
read when the store says something changed (PostgreSQL's NOTIFY, listened for from the start
of the read before) or every POLL_S otherwise, at most once a GAP_S, until the reader is told
to stop; closed on the way out even when the reading task is cancelled, so no query is left
in flight when the event loop ends."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from typing import Any, Protocol

from loopdeck.core.timeouts import bounded
from loopdeck.store.base import Location, Store
from loopdeck.store.opening import open_store

POLL_S = 0.1
# The least time between two reads: a store changing all the time is read in steps, not on
# every notification.
GAP_S = 0.02
# How often a follower looks for runs whose runner died (a dead runner commits nothing).
CRASH_CHECK_S = 1.0


class Refreshing(Protocol):
    async def refresh(self, store: Store) -> bool:
        """Read what changed since the last refresh; True when there is something to show."""
        ...


@contextlib.asynccontextmanager
async def reading(location: Location | None) -> AsyncIterator[Store]:
    """The store at `location` (the default one if None, made if missing)."""
    store = await open_store(location)
    try:
        yield store
    finally:
        # The close outlives a cancelled task, so no query is left in flight at exit.
        await asyncio.shield(store.close())


async def poll(
    reader: Refreshing,
    store: Store,
    stop: asyncio.Event,
    changed: Callable[[], object],
    poll_s: float = POLL_S,
) -> None:
    """`reader.refresh` until `stop` is set; `changed` after each refresh that changed
    something. The wait for the next change begins before each read: a change committed
    while the store is being read (a NOTIFY landing mid-read) wakes the next read at once,
    instead of waiting for another change or the poll."""
    while not stop.is_set():
        began = time.monotonic()
        change = asyncio.ensure_future(store.wait_for_change(poll_s))
        try:
            if await reader.refresh(store):
                changed()
            with contextlib.suppress(TimeoutError):
                await bounded(stop.wait(), max(0.0, GAP_S - (time.monotonic() - began)))
            if not stop.is_set():
                await _next_change(change, stop, max(0.0, poll_s - (time.monotonic() - began)))
        finally:
            change.cancel()


async def _next_change(change: asyncio.Future[None], stop: asyncio.Event, poll_s: float) -> None:
    """Returns when the store may have changed (`change`), `poll_s` passed, or `stop` is set."""
    stopped = asyncio.ensure_future(stop.wait())
    waits: set[asyncio.Future[Any]] = {change, stopped}
    try:
        await asyncio.wait(waits, timeout=poll_s, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopped.cancel()
