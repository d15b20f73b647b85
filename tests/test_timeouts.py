"""Timed waits in the runtime deliver every cancellation (the kill switch relies on it)."""

from __future__ import annotations

import asyncio

import pytest

from loopdeck.core.timeouts import bounded


async def test_a_cancellation_landing_as_the_wait_completes_still_cancels() -> None:
    # Python 3.11's wait_for returns the result here and the cancellation is lost.
    done: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    waiting = asyncio.create_task(bounded(done, 10.0))
    await asyncio.sleep(0)  # the task is now waiting on `done`
    done.set_result("reply")
    waiting.cancel()
    await asyncio.gather(waiting, return_exceptions=True)
    assert waiting.cancelled()


async def test_bounded_times_out_and_returns_in_time() -> None:
    never: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    with pytest.raises(TimeoutError):
        await bounded(never, 0.01)
    assert await bounded(asyncio.sleep(0, result="ok"), 5.0) == "ok"
    assert await bounded(asyncio.sleep(0, result="unbounded"), None) == "unbounded"
