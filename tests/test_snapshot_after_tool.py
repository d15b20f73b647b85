"""The snapshot after a tool rides in the tool's own hand-over to the env thread (`then`), and
the goal check takes it from there (`after`) (issue 11). It is never stale: a tool that raised
skips it, one nobody took is discarded, and env code it hangs in is a stray like any other."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from loopdeck.core import AutoApprover, Budget, Environment, RunConfig, Runtime, env_jobs, tool
from loopdeck.core.env_thread import EnvBusy, EnvThread
from loopdeck.core.model import ModelReply, ModelRequest, RawToolCall
from loopdeck.core.states import StopReason
from loopdeck.tuning.loop_idle import nothing_else_due


class Boom(Exception):
    pass


class CountingQueue(env_jobs.Jobs):
    """The env thread's job queue, counting hand-overs."""

    def __init__(self) -> None:
        super().__init__()
        self.labels: list[str] = []  # each job's label, "+" the label of its `then`

    @property
    def puts(self) -> int:
        return len(self.labels)

    def put(self, item: Any) -> None:
        if item is not None:
            job, _, _, ahead = item
            self.labels.append(job.label + (f"+{ahead.job.label}" if ahead else ""))
        super().put(item)


def counting(thread: EnvThread) -> CountingQueue:
    thread._jobs = jobs = CountingQueue()
    return jobs


class Counter:
    """A tiny env state: tools bump it, the snapshot reads it and notes its thread."""

    def __init__(self) -> None:
        self.value = 0
        self.snapshots: list[tuple[int, str]] = []

    def bump(self) -> int:
        self.value += 1
        return self.value

    def snapshot(self) -> dict[str, int]:
        self.snapshots.append((self.value, threading.current_thread().name))
        return {"value": self.value}


@pytest.fixture
async def thread() -> AsyncIterator[EnvThread]:
    env_thread = EnvThread()
    yield env_thread
    env_thread.close()


async def test_the_snapshot_after_a_tool_needs_no_hand_over_of_its_own(thread) -> None:
    env = Counter()
    jobs = counting(thread)
    assert await thread.call("tool", env.bump, then=("snapshot", env.snapshot)) == 1
    assert await thread.after("snapshot", env.snapshot) == {"value": 1}
    assert jobs.puts == 1
    assert env.snapshots == [(1, "loopdeck-env")]


async def test_a_tool_that_raises_skips_its_snapshot_and_the_goal_check_takes_a_fresh_one(
    thread,
) -> None:
    env = Counter()
    jobs = counting(thread)

    def crash() -> None:
        env.value += 10
        raise Boom("tool crashed")

    with pytest.raises(Boom):
        await thread.call("tool", crash, then=("snapshot", env.snapshot))
    assert env.snapshots == []
    assert await thread.after("snapshot", env.snapshot) == {"value": 10}
    assert jobs.puts == 2
    assert env.snapshots == [(10, "loopdeck-env")]


async def test_a_snapshot_nobody_took_is_never_handed_to_a_later_goal_check(thread) -> None:
    env = Counter()
    await thread.call("tool", env.bump, then=("snapshot", env.snapshot))
    await thread.call("other", env.bump)  # the env changed since that snapshot
    assert await thread.after("snapshot", env.snapshot) == {"value": 2}
    # a `then` is taken at most once
    await thread.call("tool", env.bump, then=("snapshot", env.snapshot))
    assert await thread.after("snapshot", env.snapshot) == {"value": 3}
    env.value = 7
    assert await thread.after("snapshot", env.snapshot) == {"value": 7}
    assert [value for value, _ in env.snapshots] == [1, 2, 3, 7]


async def test_a_tool_returns_while_its_snapshot_hangs_and_the_hang_is_a_stray() -> None:
    env = Counter()
    release = threading.Event()

    def stuck_snapshot() -> dict[str, int]:
        release.wait(30)
        return env.snapshot()

    thread = EnvThread(stray_wait_s=0.2)
    try:
        # the tool's result is not held up by what runs after it
        assert await thread.call("tool", env.bump, then=("snapshot", stuck_snapshot)) == 1
        assert thread.stray is not None and thread.stray.startswith("snapshot")
        waiting = asyncio.create_task(thread.after("snapshot", stuck_snapshot))
        await asyncio.sleep(0)
        waiting.cancel()  # a kill while the goal check waits
        with pytest.raises(asyncio.CancelledError):
            await waiting
        with pytest.raises(EnvBusy, match="snapshot"):
            await thread.call("next", env.bump)
        release.set()
        while thread.stray is not None:
            await asyncio.sleep(0.01)
        assert await thread.call("next", env.bump) == 2
    finally:
        release.set()
        thread.close()


async def abandon(thread: EnvThread, label: str, release: threading.Event) -> None:
    """A tool, with the snapshot after it, that the runtime stops waiting for (its timeout,
    a kill) while it blocks until `release`."""
    waiting = asyncio.create_task(
        thread.call(label, lambda: release.wait(30), then=("snapshot", dict))
    )
    await asyncio.sleep(0)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting


async def test_an_async_tool_never_runs_beside_a_snapshot_still_running(thread) -> None:
    env = Counter()
    release = threading.Event()
    running: list[str] = []

    def snapshot() -> dict[str, int]:
        running.append("snapshot")
        release.wait(30)
        running.remove("snapshot")
        return env.snapshot()

    async def async_tool() -> list[str]:
        return list(running)

    try:
        await thread.call("tool", env.bump, then=("snapshot", snapshot))
        ran = asyncio.create_task(thread.run_async("tool async", async_tool))
        await asyncio.sleep(0.05)
        assert not ran.done()  # it waits for the snapshot nobody took
        release.set()
        assert await ran == []
    finally:
        release.set()


async def test_a_goal_check_after_an_abandoned_tool_waits_for_it_only_up_to_the_bound() -> None:
    """A write past its timeout is outcome-unknown and followed by the goal check: its
    snapshot runs only once the write ends, so the check waits for the write as any env call
    waits for a stray one, and a write that never ends is `EnvBusy`, not a hang."""
    release = threading.Event()
    thread = EnvThread(stray_wait_s=0.2)
    try:
        await abandon(thread, "tool slow_write", release)
        with pytest.raises(EnvBusy, match="slow_write"):
            await thread.after("snapshot", dict)
        with pytest.raises(EnvBusy, match="slow_write"):  # named, not its snapshot
            await thread.call("next", dict)
        release.set()  # the write ends after all: its snapshot, taken after it, is good
        thread.stray_wait_s = 30
        assert await thread.after("snapshot", dict) == {}
    finally:
        release.set()
        thread.close()


@settings(max_examples=40, deadline=None)
@given(
    steps=st.lists(
        st.tuples(
            st.sampled_from(["tool", "crash", "other", "after"]),
            st.sampled_from([0.0, 0.0003, 0.0006, 0.002]),  # around the loop's quick wait
            st.booleans(),  # the console's rule: block only when idle
        ),
        min_size=1,
        max_size=12,
    )
)
def test_the_goal_check_always_sees_the_state_as_it_is(
    steps: list[tuple[str, float, bool]],
) -> None:
    """Whatever the order and timing of tools, crashes, other env calls and goal checks, a
    goal check sees the env's state as it is then, and every call returns its own result."""

    async def scenario() -> None:
        env = Counter()
        thread = EnvThread()
        snapshot_after = ("snapshot", env.snapshot)

        def slow(seconds: float, fn: Any) -> Any:
            def body() -> Any:
                if seconds:
                    threading.Event().wait(seconds)
                return fn()

            return body

        def crash() -> None:
            env.value += 1
            raise Boom(str(env.value))

        try:
            for kind, seconds, idle_only in steps:
                thread.only_when_idle = nothing_else_due if idle_only else None
                if kind == "after":
                    assert await thread.after("snapshot", env.snapshot) == {"value": env.value}
                elif kind == "crash":
                    with pytest.raises(Boom):
                        await thread.call("tool", slow(seconds, crash), then=snapshot_after)
                else:
                    then = snapshot_after if kind == "tool" else None
                    before = env.value
                    assert await thread.call(kind, slow(seconds, env.bump), then=then) == (
                        before + 1
                    )
        finally:
            thread.close()

    asyncio.run(scenario())


class Args(BaseModel):
    i: int = 0


class PollingCounter(Environment):
    """Polls a job that finishes on the third poll."""

    def snapshot(self) -> dict[str, Any]:
        return {"polls": self.data.get("polls", 0)}

    def unmet(self, snapshot: dict[str, Any]) -> list[str]:
        return [] if snapshot["polls"] >= 3 else ["the job is still running"]

    @tool(args=Args, exempt=True)
    def poll(self, args: Args) -> dict[str, Any]:
        """Poll the job."""
        self.data["polls"] = self.data.get("polls", 0) + 1
        return {"polls": self.data["polls"]}


class Polls:
    name = "polls"

    async def complete(self, request: ModelRequest) -> ModelReply:
        if request.role == "planner":
            return ModelReply(model=self.name, content="1. Poll until the job finishes.")
        turn = sum(1 for m in request.messages if m.get("role") == "assistant")
        call = RawToolCall(id=f"p{turn}", name="poll", arguments=f'{{"i": {turn}}}')
        return ModelReply(model=self.name, content=None, tool_calls=[call])


async def test_a_run_takes_two_env_hand_overs_a_step_and_sees_the_goal_met_at_once() -> None:
    budget = Budget(
        max_turns=50, max_tool_calls=50, max_tokens=10**9, max_cost_usd=100.0, deadline_s=600
    )
    config = RunConfig(env="polls", model="polls", goal="the job finishes", budget=budget)
    runtime = Runtime(config, PollingCounter(Path("."), {}), Polls(), AutoApprover())
    jobs = counting(runtime.env_thread)
    outcome = await runtime.run()
    assert outcome.stop_reason is StopReason.GOAL_MET
    assert outcome.tool_calls == 3  # the goal check after the third poll saw it met
    steps = jobs.labels[jobs.labels.index("fingerprint") :]
    # each step: the fingerprint, the tool with the snapshot after it, the goal check on the
    # new state; no hand-over for the snapshot of its own
    assert steps[:9] == ["fingerprint", "tool poll+snapshot", "goal check"] * 3


class BrokenAfterAPoll(PollingCounter):
    def snapshot(self) -> dict[str, Any]:
        if self.data.get("polls"):
            raise RuntimeError("the snapshot broke")
        return super().snapshot()


async def test_a_snapshot_that_raises_after_a_tool_ends_the_run_naming_it() -> None:
    budget = Budget(
        max_turns=50, max_tool_calls=50, max_tokens=10**9, max_cost_usd=100.0, deadline_s=600
    )
    config = RunConfig(env="polls", model="polls", goal="the job finishes", budget=budget)
    runtime = Runtime(config, BrokenAfterAPoll(Path("."), {}), Polls(), AutoApprover())
    outcome = await runtime.run()
    assert outcome.stop_reason is StopReason.CRASHED
    assert "the snapshot broke" in outcome.detail
    assert [c.status.value for c in outcome.calls] == ["executed"]  # the poll is recorded
