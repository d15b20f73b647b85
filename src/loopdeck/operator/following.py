"""A console's reader of a whole store (the fleet, the approvals inbox): the store opened,
read every POLL_S until the reader is told to stop, and closed on the way out even when the
reading task is cancelled, so no query is left in flight when the event loop ends."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Protocol

from loopdeck.core.timeouts import bounded
from loopdeck.store.base import Location, Store
from loopdeck.store.opening import open_store

POLL_S = 0.1
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
    something."""
    while not stop.is_set():
        if await reader.refresh(store):
            changed()
        with contextlib.suppress(TimeoutError):
            await bounded(stop.wait(), poll_s)
