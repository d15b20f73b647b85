"""A run's env thread is started ahead, off the run's loop (`core/env_spare.py`): its first
env call starts no thread. The spare is a new thread, never one that ran env code: nothing an
earlier run's env code left on its thread is on it, and a thread left running abandoned env
code is never taken again. A forked child starts its own (issue 43)."""

from __future__ import annotations

import asyncio
import contextvars
import os
import signal
import threading
import time
from collections.abc import Iterator

import pytest

from loopdeck.core import env_thread
from loopdeck.core.env_spare import Serving, Spares
from loopdeck.core.env_thread import EnvThread

BOUND_S = 30.0  # a condition not met by then is a failure, whatever the machine's load


async def _spare_ready() -> Serving:
    """The spare, once the starter has it ready (waited for as a condition)."""
    spares = env_thread._SPARES
    give_up = time.monotonic() + BOUND_S
    while (ready := spares._kept) is None:
        assert time.monotonic() < give_up, "no spare was started"
        await asyncio.sleep(0.001)
    return ready


async def _runs_closed() -> None:
    """Two env threads that served a call and were closed: a process making runs one after
    another keeps a spare from then on."""
    for _ in range(2):
        thread = EnvThread()
        assert await thread.call("call", lambda: 1) == 1
        thread.close()


@pytest.fixture
def thread_starts(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The names of the threads `Thread.start` was called on from this (the loop's) thread."""
    started: list[str] = []
    original = threading.Thread.start
    loop_thread = threading.get_ident()

    def recording(self: threading.Thread) -> None:
        if threading.get_ident() == loop_thread:
            started.append(self.name)
        original(self)

    monkeypatch.setattr(threading.Thread, "start", recording)
    yield started


async def test_a_runs_first_env_call_starts_no_thread_on_its_loop(thread_starts) -> None:
    await _runs_closed()
    jobs, spare = await _spare_ready()
    thread_starts.clear()
    thread = EnvThread()
    try:
        assert await thread.call("first", threading.current_thread) is spare
        assert thread._jobs is jobs
        assert thread_starts == []  # the spare was started off the loop, before the run
    finally:
        thread.close()


local = threading.local()
said: contextvars.ContextVar[str] = contextvars.ContextVar("said", default="nothing")


def _leave_things_behind() -> threading.Thread:
    local.value = "an earlier run's"
    said.set("an earlier run's")
    asyncio.set_event_loop(asyncio.new_event_loop())
    return threading.current_thread()


def _what_is_left() -> tuple[str, str, bool]:
    try:
        asyncio.get_event_loop()  # off the main thread: raises unless a loop was set for it
        loop_set = True
    except RuntimeError:
        loop_set = False
    return getattr(local, "value", "nothing"), said.get(), loop_set


async def test_a_spare_is_a_new_thread_with_nothing_of_an_earlier_run_on_it() -> None:
    first = EnvThread()
    earlier = await first.call("leaves things behind", _leave_things_behind)
    first.close()
    for _ in range(3):  # whatever thread serves the next runs: a new one each time
        thread = EnvThread()
        try:
            assert await thread.call("what is left", _what_is_left) == ("nothing", "nothing", False)
            assert await thread.call("which thread", threading.current_thread) is not earlier
        finally:
            thread.close()
    earlier.join(BOUND_S)
    assert not earlier.is_alive()  # a thread that served a run ends, never kept


async def test_a_thread_left_with_abandoned_env_code_is_never_taken_again() -> None:
    await _runs_closed()
    release = threading.Event()
    hung = EnvThread(stray_wait_s=BOUND_S)
    with pytest.raises(TimeoutError):
        await hung.call("hangs", release.wait, timeout_s=0.05)
    assert hung.stray is not None
    stuck = hung._thread
    assert stuck is not None
    hung.close()
    try:
        await _spare_ready()
        for _ in range(3):
            thread = EnvThread(stray_wait_s=0.5)
            try:  # neither waits for the abandoned call nor runs on its thread
                assert await thread.call("quick", threading.current_thread) is not stuck
            finally:
                thread.close()
        assert stuck.is_alive()
    finally:
        release.set()
    stuck.join(BOUND_S)
    assert not stuck.is_alive()  # it ends once its call does


@pytest.mark.skipif(not hasattr(os, "fork"), reason="forks")
async def test_a_forked_child_starts_its_own_env_thread() -> None:
    await _runs_closed()
    _, parents = await _spare_ready()
    pid = os.fork()
    if pid == 0:  # the child: the parent's spare is not here; a call must still be served
        code = 1
        try:
            signal.alarm(int(BOUND_S))  # a call waiting on the parent's thread never ends

            async def child() -> bool:
                thread = EnvThread()
                try:
                    return await thread.call("in the child", threading.current_thread) not in (
                        parents,
                        None,
                    )
                finally:
                    thread.close()

            code = 0 if asyncio.run(child()) else 1
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    thread = EnvThread()  # the parent's spare still serves the parent
    try:
        assert await thread.call("in the parent", threading.current_thread) is parents
    finally:
        thread.close()


async def test_a_process_that_makes_one_run_starts_no_spare() -> None:
    spares = Spares(lambda: env_thread._serving(env_thread.Jobs()))
    assert spares.take() is None
    spares.refill()  # as the run goes on after its first env call
    assert spares._wanted is None and spares._kept is None  # no starter, no spare


async def test_a_spare_whose_thread_ended_is_not_taken() -> None:
    spares = Spares(lambda: env_thread._serving(env_thread.Jobs()))
    jobs = env_thread.Jobs()
    dead = threading.Thread(target=lambda: None)
    dead.start()
    dead.join()
    spares._kept = (jobs, dead)
    try:
        assert spares.take() is None
    finally:
        jobs.close_reading_end()
