"""A timeout that never swallows a cancellation.

On Python 3.11, `asyncio.wait_for` can lose a cancellation that lands in the same loop turn as
the awaited thing completing: it returns the result, and the caller runs on as if never
cancelled. The kill switch and the runtime's own stops cancel what is in flight, so every
timed wait in the runtime goes through `bounded` (`asyncio.timeout`, whose cancellation is
delivered as a plain `await` delivers it).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

T = TypeVar("T")


async def bounded(awaitable: Awaitable[T], seconds: float | None) -> T:
    """`await awaitable`, raising TimeoutError after `seconds` (None: no bound)."""
    async with asyncio.timeout(seconds):
        return await awaitable
