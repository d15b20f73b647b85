"""What waits for the operator in the store's other runs, for a console opened on one run
(`loopdeck run`, `attach`): the header's "+N in other runs · i". A console opened on the
fleet has it from the fleet, which reads every run anyway."""

from __future__ import annotations

import asyncio

from loopdeck.operator import following
from loopdeck.operator.inbox import WaitingCount
from loopdeck.operator.records import Location
from loopdeck.tui.shared_state import SharedState

COUNT_S = 1.0  # a count for a header: once a second is soon enough, and cheap


async def count_waiting(shared: SharedState, db_path: Location | None, stop: asyncio.Event) -> None:
    """Keep `shared.waiting_by_run` at what waits in each run of the store until `stop`."""
    count = WaitingCount()

    def counted() -> None:
        shared.waiting_by_run = count.by_run

    async with following.reading(db_path) as store:
        await following.poll(count, store, stop, counted, COUNT_S)
