"""A console's follower reads again at once when the store changed during its last read
(issue 42's bench: a NOTIFY landing mid-read used to wait for the next change or the poll)."""

from __future__ import annotations

import asyncio
from typing import Any

from loopdeck.operator import following

POLL_S = 600.0  # never reached here: only a change wakes the follower


class Notifying:
    """A store that announces changes as PostgreSQL's listener does: each change wakes the
    waits begun before it."""

    def __init__(self) -> None:
        self._changed = asyncio.Event()

    def announce(self) -> None:
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    async def wait_for_change(self, timeout_s: float) -> None:
        await self._changed.wait()


class Reader:
    def __init__(self, store: Notifying, stop: asyncio.Event) -> None:
        self.store, self.stop = store, stop
        self.reads = 0
        self.read_again = asyncio.Event()

    async def refresh(self, store: Any) -> bool:
        self.reads += 1
        if self.reads == 1:
            await asyncio.sleep(0)  # the read's query in flight
            self.store.announce()  # a commit lands while it is
        else:
            self.read_again.set()
            self.stop.set()
        return True


async def test_a_change_during_a_read_wakes_the_next_read() -> None:
    store, stop = Notifying(), asyncio.Event()
    reader = Reader(store, stop)
    polling = asyncio.create_task(
        following.poll(reader, store, stop, lambda: None, POLL_S)  # type: ignore[arg-type]
    )
    try:
        # far under POLL_S: woken by the change, not by the poll
        await asyncio.wait_for(reader.read_again.wait(), 60)
    finally:
        stop.set()
        await polling
    assert reader.reads == 2
