"""The env thread's two ways of handing a result back: taken at once by the loop's short wait,
or through the loop's future when the call outlasts it. Either way exactly once, errors
included, and a call the runtime stopped waiting for is still discarded (issue 11)."""

from __future__ import annotations

import asyncio
import functools
import os
import threading
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loopdeck.core import env_thread
from loopdeck.core.env_thread import EnvBusy, EnvThread
from loopdeck.tuning.loop_idle import nothing_else_due


class Boom(Exception):
    pass


@pytest.fixture
def settled(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """Every `_settle` the env thread schedules on the loop, recorded."""
    made: list[object] = []
    original = env_thread._settle

    def recording(future: asyncio.Future[object], job: object) -> None:
        made.append(job)
        original(future, job)  # type: ignore[arg-type]

    monkeypatch.setattr(env_thread, "_settle", recording)
    return made


@pytest.fixture
def waits(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """How long the loop offered to block for each call's result (`take_quickly`'s wait)."""
    offered: list[float] = []
    original = env_thread._Job.take_quickly

    def recording(job: env_thread._Job, seconds: float) -> bool:
        offered.append(seconds)
        return original(job, seconds)

    monkeypatch.setattr(env_thread._Job, "take_quickly", recording)
    return offered


async def test_a_quick_call_is_handed_over_without_a_turn_of_the_loop(settled) -> None:
    # a wait long enough for any loaded machine: the short path is then certain
    made = settled
    thread = EnvThread()
    thread.quick_wait_s = 30.0
    names: list[str] = []
    try:
        assert await thread.call("quick", lambda: threading.current_thread().name) == (
            "loopdeck-env"
        )
        for i in range(50):
            names.append(await thread.call("quick", str, i))
    finally:
        thread.close()
    assert names == [str(i) for i in range(50)]
    # a result taken by the short wait is never scheduled on the loop as well
    assert made == []


async def test_a_slow_call_comes_through_the_future_once(settled) -> None:
    made = settled
    thread = EnvThread()
    release = threading.Event()

    def slow() -> str:
        release.wait(30)
        return "slow"

    try:
        waiting = asyncio.create_task(thread.call("slow", slow))
        # the loop goes on while the env code runs past the short wait
        await asyncio.sleep(0)
        assert not waiting.done()
        release.set()
        assert await waiting == "slow"
    finally:
        thread.close()
    assert len(made) == 1


@settings(max_examples=60, deadline=None)
@given(
    outcomes=st.lists(
        st.tuples(st.booleans(), st.sampled_from([0.0, 0.0002, 0.0005, 0.002])),
        min_size=1,
        max_size=12,
    )
)
def test_every_result_and_error_arrives_exactly_once(outcomes: list[tuple[bool, float]]) -> None:
    """Calls that end before, around and after the short wait, failing or not: each await
    gets its own result or error, whichever way it was handed over."""

    async def scenario() -> None:
        thread = EnvThread()
        try:
            for i, (fails, seconds) in enumerate(outcomes):

                def body(i: int = i, fails: bool = fails, seconds: float = seconds) -> int:
                    if seconds:
                        time.sleep(seconds)
                    if fails:
                        raise Boom(i)
                    return i

                if fails:
                    with pytest.raises(Boom) as raised:
                        await thread.call("body", body)
                    assert raised.value.args == (i,)
                else:
                    assert await thread.call("body", body) == i
        finally:
            thread.close()

    asyncio.run(scenario())


async def test_a_call_the_runtime_stopped_waiting_for_is_discarded_and_waited_for() -> None:
    thread = EnvThread(stray_wait_s=30)
    release = threading.Event()
    try:
        waiting = asyncio.create_task(thread.call("stuck", lambda: release.wait(30) and "late"))
        await asyncio.sleep(0)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        assert thread.stray is not None and thread.stray.startswith("stuck")
        # the next call waits for the stray one to end, then runs
        nxt = asyncio.create_task(thread.call("next", lambda: "next"))
        await asyncio.sleep(0.05)
        assert not nxt.done()
        release.set()
        assert await nxt == "next"
        assert thread.stray is None
    finally:
        thread.close()


async def test_a_stray_call_past_the_bound_is_env_busy() -> None:
    thread = EnvThread(stray_wait_s=0.1)
    release = threading.Event()
    try:
        waiting = asyncio.create_task(thread.call("stuck", lambda: release.wait(30)))
        await asyncio.sleep(0)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        with pytest.raises(EnvBusy, match="stuck"):
            await thread.call("next", lambda: None)
    finally:
        release.set()
        thread.close()


async def test_a_consoles_loop_waits_for_env_code_only_when_it_has_nothing_else_to_do(
    settled, waits
) -> None:
    """Under a console, a loop with a callback ready (a frame, a key) or a timer due never
    blocks on env code: it takes the result if the code has ended already, else the result
    comes through the loop. An idle loop waits for it and takes it itself."""
    made = settled
    thread = EnvThread()
    thread.only_when_idle = nothing_else_due
    thread.quick_wait_s = 30.0  # long enough for any loaded machine, when it is waited
    loop = asyncio.get_running_loop()
    release = threading.Event()
    try:
        assert await thread.call("idle", lambda: "idle") == "idle"
        assert made == []
        loop.call_soon(lambda: None)  # something ready to run: no blocking
        assert await thread.call("busy", lambda: "busy") == "busy"
        timer = loop.call_later(0.001, lambda: None)  # due within the wait: no blocking
        assert await thread.call("timer", lambda: "timer") == "timer"
        timer.cancel()
        loop.call_soon(release.set)  # code still running when the loop looks: through it
        assert await thread.call("running", lambda: release.wait(30) and "ran") == "ran"
        # blocked only when idle; what had not ended when the loop looked came through it
        assert waits == [30.0, 0.0, 0.0, 0.0]
        assert made[-1].label == "running"  # type: ignore[attr-defined]
        assert {job.label for job in made} <= {"busy", "timer", "running"}  # type: ignore[attr-defined]
    finally:
        thread.close()


async def test_headless_the_loop_waits_for_quick_env_code_whatever_else_is_ready(
    settled,
) -> None:
    made = settled
    thread = EnvThread()
    thread.quick_wait_s = 30.0
    loop = asyncio.get_running_loop()
    try:
        loop.call_soon(lambda: None)
        timer = loop.call_later(0.001, lambda: None)
        assert await thread.call("busy", lambda: "busy") == "busy"
        assert made == []
        timer.cancel()
    finally:
        thread.close()


async def test_a_run_under_the_console_waits_for_env_code_only_when_idle() -> None:
    from conftest import SAMPLES
    from console_helpers import console_app, finished, run_screen, wait_until

    from loopdeck.core.approvals import AutoApprover

    app = console_app(SAMPLES / "service_outage", "solve", approver=AutoApprover())
    runtime = app.prepared.runtime
    assert not runtime.env_thread.only_when_idle
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_until(pilot, lambda: finished(app))
        outcome = run_screen(app).outcome
    assert runtime.env_thread.only_when_idle
    assert outcome is not None and outcome.stop_reason.value == "goal_met"


async def test_env_code_that_outlasted_the_wait_is_not_waited_for_next_time(waits) -> None:
    """An MCP round trip or a sleeping tool outlasts the short wait every time: the loop does
    not block for it again (it would only block, then await it anyway). Code under the same
    label that turns quick is waited for again from its next call."""
    thread = EnvThread()
    thread.quick_wait_s = 0.05
    try:
        assert await thread.call("read", lambda: time.sleep(0.1) or "slow") == "slow"
        assert await thread.call("read", lambda: "quick now") == "quick now"
        assert await thread.call("read", lambda: "quick") == "quick"
        assert await thread.call("other", lambda: "other") == "other"
    finally:
        thread.close()
    # waited (and outlasted), not waited, waited again; another label is its own
    assert waits == [0.05, 0.0, 0.05, 0.05]


async def test_a_call_whose_wait_was_stopped_counts_as_slow(waits) -> None:
    thread = EnvThread(stray_wait_s=30)
    thread.quick_wait_s = 0.001
    release = threading.Event()
    try:
        waiting = asyncio.create_task(thread.call("stuck", lambda: release.wait(30)))
        await asyncio.sleep(0)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        release.set()
        assert await thread.call("stuck", lambda: "done") == "done"
    finally:
        thread.close()
    assert waits == [0.001, 0.0]


def _pipe_end(fd: int) -> tuple[int, tuple[int, int]]:
    stat = os.fstat(fd)
    return fd, (stat.st_dev, stat.st_ino)


def _pipe_at(fd: int) -> tuple[int, int] | None:
    """The (device, inode) of what `fd` is open on now, None if it is closed."""
    try:
        stat = os.fstat(fd)
    except OSError:
        return None
    return stat.st_dev, stat.st_ino


async def test_a_closed_env_thread_ends_and_leaves_no_pipe_open() -> None:
    """The thread waits on a pipe (`core/env_jobs.py`): closed, it ends after its call and
    both ends of the pipe are closed, however many runs a process makes."""
    threads, pipes = [], set()
    for i in range(20):
        thread = EnvThread()
        assert await thread.call("call", lambda i=i: i) == i
        jobs = thread._jobs
        assert jobs is not None
        pipes |= {_pipe_end(fd) for fd in (jobs._read, jobs._write)}
        threads.append(thread._thread)
        thread.close()
    for t in threads:
        assert t is not None
        t.join(30)
        assert not t.is_alive()
    # Each end of each thread's pipe, by its number and the pipe it was: a number reused since
    # (another test's thread opening a file meanwhile, on a loaded machine) is not a leak.
    assert {fd for fd, pipe in pipes if _pipe_at(fd) == pipe} == set()


async def test_an_env_thread_never_closed_ends_when_it_is_dropped() -> None:
    import gc

    thread = EnvThread()
    # its last call's code holds it, as the runtime's state reads do
    assert await thread.call("call", functools.partial(lambda held: "done", thread)) == "done"
    worker = thread._thread
    assert worker is not None
    del thread
    # The env thread may still be handing the call back (its frame holding the call, so the
    # EnvThread, for a moment after the result was taken: seen on a loaded machine); the
    # next collection after it lets go drops it.
    give_up = time.monotonic() + 30
    while worker.is_alive() and time.monotonic() < give_up:
        gc.collect()
        worker.join(0.05)
    assert not worker.is_alive()


async def test_a_call_after_close_runs_on_a_new_thread() -> None:
    thread = EnvThread()
    try:
        assert await thread.call("before", lambda: 1) == 1
        thread.close()
        assert await thread.call("after", lambda: 2) == 2
    finally:
        thread.close()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="forks")
async def test_a_forked_child_closing_its_copy_leaves_the_parents_thread_serving() -> None:
    """A child forked while the thread runs has the pipe but not the thread: its close
    closes its own copy and never tells the parent's thread to end."""
    thread = EnvThread()
    try:
        assert await thread.call("before", lambda: 1) == 1
        pid = os.fork()
        if pid == 0:  # the child: close its copy, then leave at once
            code = 1
            try:
                thread.close()
                code = 0
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert await thread.call("after", lambda: 2) == 2
    finally:
        thread.close()
