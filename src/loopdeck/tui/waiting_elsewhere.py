"""What waits for the operator in the store's other runs, for a console opened on one run
(`loopdeck run`, `attach`): the header's "+N in other runs · i". A console opened on the
fleet has it from the fleet, which reads every run anyway."""

from __future__ import annotations

import asyncio
from typing import Protocol

from loopdeck.operator import following
from loopdeck.operator.inbox import WaitingCount
from loopdeck.operator.records import Location

COUNT_S = 1.0  # a count for a header: once a second is soon enough, and cheap


class Counted(Protocol):
    db_path: Location | None
    waiting_by_run: dict[str, int]


async def count_waiting(console: Counted, stop: asyncio.Event) -> None:
    """Keep `console.waiting_by_run` at what waits in each run of the store until `stop`."""
    count = WaitingCount()

    def counted() -> None:
        console.waiting_by_run = count.by_run

    async with following.reading(console.db_path) as store:
        await following.poll(count, store, stop, counted, COUNT_S)
