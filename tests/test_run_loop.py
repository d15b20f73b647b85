"""This process's runs on a loop of their own (`operator/run_loop.py`, issue 43): the console's
loop only hears what happened and sends what the operator does."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from loopdeck.operator import run_loop


async def test_a_coroutine_runs_on_the_runs_thread_and_its_result_comes_back() -> None:
    async def where() -> str:
        assert run_loop.on_runs_loop()
        return threading.current_thread().name

    assert not run_loop.on_runs_loop()
    assert await run_loop.run(where()) == "loopdeck-runs"


async def test_its_error_reaches_the_caller() -> None:
    async def fails() -> None:
        raise ValueError("no such call")

    with pytest.raises(ValueError, match="no such call"):
        await run_loop.run(fails())


async def test_a_caller_cancelled_waits_until_the_run_has_ended() -> None:
    """Cancelling the caller cancels the run's task, and the caller is cancelled only once
    the task's own cleanup (recording its stop, closing its store) is done."""
    started, cleaned = threading.Event(), threading.Event()

    async def long_run() -> None:
        started.set()
        try:
            await asyncio.Event().wait()
        finally:
            await asyncio.sleep(0)  # cleanup that itself awaits
            cleaned.set()

    caller = asyncio.ensure_future(run_loop.run(long_run()))
    while not started.is_set():
        await asyncio.sleep(0.001)
    caller.cancel()
    with pytest.raises(asyncio.CancelledError):
        await caller
    assert cleaned.is_set()


async def test_what_the_runs_thread_tells_is_heard_on_the_hearer_s_loop_in_order() -> None:
    here = threading.get_ident()
    heard: list[tuple[int, int]] = []
    told = run_loop.Outbox(asyncio.get_running_loop())

    async def tell() -> None:
        for n in range(500):
            told.tell(lambda n: heard.append((n, threading.get_ident())), n)

    await run_loop.run(tell())
    while len(heard) < 500:
        await asyncio.sleep(0.001)
    assert [n for n, _ in heard] == list(range(500))
    assert {thread for _, thread in heard} == {here}


async def test_a_hearer_that_raises_does_not_stop_the_rest_being_heard() -> None:
    heard: list[int] = []
    told = run_loop.Outbox(asyncio.get_running_loop())
    loop = asyncio.get_running_loop()
    errors: list[object] = []
    loop.set_exception_handler(lambda _, context: errors.append(context.get("exception")))

    def hear(n: int) -> None:
        if n == 1:
            raise RuntimeError("a broken hearer")
        heard.append(n)

    async def tell() -> None:
        for n in range(3):
            told.tell(hear, n)

    await run_loop.run(tell())
    while len(heard) < 2:
        await asyncio.sleep(0.001)
    assert heard == [0, 2]
    assert [str(e) for e in errors] == ["a broken hearer"]


async def test_a_console_s_run_emits_on_the_runs_thread_and_is_heard_on_the_console_s() -> None:
    from conftest import SAMPLES
    from console_helpers import console_app, finished, wait_until

    from loopdeck.core.approvals import AutoApprover

    app = console_app(SAMPLES / "service_outage", "solve", approver=AutoApprover())
    assert app.session is not None
    link = app.session.link()
    emitted_on: set[str] = set()
    heard_on: set[int] = set()
    # Before the run starts: every event of it is seen.
    link.runtime.bus.subscribe(  # type: ignore[union-attr]
        lambda _: emitted_on.add(threading.current_thread().name)
    )
    link.subscribe(lambda _: heard_on.add(threading.get_ident()))
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_until(pilot, lambda: finished(app))
        await wait_until(pilot, lambda: bool(heard_on))
    assert emitted_on == {"loopdeck-runs"}
    assert heard_on == {threading.get_ident()}


async def test_a_frame_shows_what_the_run_told_before_it_not_a_delivery_later() -> None:
    """The run screen's frame hears what the runs' thread told and its outbox still holds
    (deliveries are at most one each 10 ms) before it folds: the frame is not behind the run
    by a delivery (bench/console_load.py, the screen behind a zero-latency runaway)."""
    from conftest import SAMPLES
    from console_helpers import console_app, finished, run_screen, wait_until

    from loopdeck.core.approvals import AutoApprover
    from loopdeck.core.events import OperatorMessage

    app = console_app(SAMPLES / "service_outage", "solve", approver=AutoApprover())
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_until(pilot, lambda: finished(app))
        screen = run_screen(app)
        assert screen is not None
        runtime = screen.link.runtime
        assert runtime is not None
        [told] = screen.link._outboxes.values()  # type: ignore[attr-defined]  # the console's
        told.gap = 3600.0  # from now on its own delivery waits an hour
        # No frame is drawn until the test's: one drawn by the frame timer while the test
        # awaits (a loaded machine) would fold "heard" alone, before the frame looked at.
        screen._pacer._next_frame_at = float("inf")
        screen._pacer._begun_at = time.monotonic() + 3600  # its paint is not taken as lost

        async def say(text: str) -> None:
            runtime.bus.emit(OperatorMessage, run_id=runtime.config.run_id, text=text, by="t")

        await run_loop.run(say("heard"))
        told.deliver_now()
        await run_loop.run(say("on its way"))
        batches: list[list[str]] = []
        flush = screen.flush

        def seen_flush() -> None:
            batches.append([getattr(e, "text", "") for e in screen.arrived])
            flush()

        screen.flush = seen_flush  # type: ignore[method-assign]
        screen._pacer._next_frame_at = 0.0  # the next frame is due
        screen._pacer.due()
    assert batches[0] == ["heard", "on its way"]
