"""Timed waits in the runtime deliver every cancellation (the kill switch relies on it)."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine

import pytest

from loopdeck.core.control import Interrupted, RunControl
from loopdeck.core.states import StopReason
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


# RunControl.interruptible cancels the run's own task (no task per wait): the cases a task of
# its own used to keep apart.


def _control() -> RunControl:
    return RunControl(emit=lambda make, *args, **fields: None, run_id="r1")


async def _then_next_wait(
    control: RunControl, first: Coroutine[None, None, str]
) -> tuple[str, bool]:
    """What the first wait returned, and whether the next wait was interrupted."""
    result = await control.interruptible(first)
    await asyncio.sleep(0)  # no cancellation is left over for later awaits
    try:
        await control.interruptible(asyncio.sleep(0))
    except Interrupted:
        return result, True
    return result, False


async def _waiting(task: asyncio.Task[object]) -> None:
    """Until `task` is suspended on a future (inside `interruptible`'s wait). asyncio has no
    public way to ask: `Task._fut_waiter` is the future it waits on, read here alone."""
    while task._fut_waiter is None:  # type: ignore[attr-defined]
        await asyncio.sleep(0)


async def test_a_kill_from_another_task_interrupts_the_wait() -> None:
    control = _control()
    run = asyncio.create_task(control.interruptible(asyncio.sleep(60)))
    await _waiting(run)
    control.request_kill("operator")
    with pytest.raises(Interrupted) as stopped:
        await run
    assert stopped.value.reason is StopReason.KILLED
    assert run.cancelling() == 0


async def test_a_wait_that_swallows_the_kill_keeps_its_result_and_the_next_wait_stops() -> None:
    control = _control()

    async def stubborn() -> str:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            return "finished anyway"
        return "slept"

    task = asyncio.create_task(_then_next_wait(control, stubborn()))
    await _waiting(task)
    control.request_kill("operator")
    assert await task == ("finished anyway", True)
    assert task.cancelling() == 0


async def test_a_kill_from_the_runs_own_code_is_taken_at_the_next_wait() -> None:
    control = _control()

    async def approver_that_kills() -> str:
        control.request_kill("approver")
        return "approve"

    task = asyncio.create_task(_then_next_wait(control, approver_that_kills()))
    assert await task == ("approve", True)
    assert task.cancelling() == 0


async def test_cancelling_the_run_and_killing_it_at_once_cancels_it() -> None:
    control = _control()
    run = asyncio.create_task(control.interruptible(asyncio.sleep(60)))
    await _waiting(run)
    control.request_kill("operator")
    run.cancel()  # the process is leaving: that cancellation is not swallowed
    with pytest.raises(asyncio.CancelledError):
        await run


async def test_a_wait_within_a_wait_is_still_interrupted_after_the_inner_one_ends() -> None:
    control = _control()

    async def outer() -> None:
        await control.interruptible(asyncio.sleep(0))
        await asyncio.sleep(60)

    run = asyncio.create_task(control.interruptible(outer()))
    await asyncio.sleep(0)
    await _waiting(run)
    control.request_kill("operator")
    with pytest.raises(Interrupted):
        await run
