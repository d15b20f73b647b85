"""The read of the state a decision's calls are proposed on is begun as the decision is read,
before it is recorded (`StateReads.read_ahead`, `EnvThread.start`): the env thread wakes while
the loop records the decision, and `state_hash` takes the read. It is still a read after the
model's reply; one begun before a `forget` (a pause, the env saying it changed) is not taken,
and a rebuilt run's reads, served from its log in order, are never begun early (issue 43)."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from conftest import Recorder
from pydantic import BaseModel

from loopdeck.core import AutoApprover, Budget, Environment, RunConfig, Runtime, env_jobs, tool
from loopdeck.core.env_thread import EnvThread
from loopdeck.core.events import DecisionMade, EventBus
from loopdeck.core.model import ModelReply, ModelRequest, RawToolCall
from loopdeck.core.recorded_inputs import RecordedReads
from loopdeck.core.state_reads import StateReads
from loopdeck.core.states import StopReason


class Args(BaseModel):
    i: int = 0


class Job(Environment):
    """A job that finishes on its own at the third poll (its state changes any time)."""

    def snapshot(self) -> dict[str, Any]:
        return {"polls": self.data.get("polls", 0)}

    def unmet(self, snapshot: dict[str, Any]) -> list[str]:
        return [] if snapshot["polls"] >= 3 else ["the job is running"]

    @tool(args=Args)
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


class Puts(env_jobs.Jobs):
    """The env thread's queue, noting each hand-over's label and the events made before it."""

    def __init__(self, bus: EventBus) -> None:
        super().__init__()
        self.bus = bus
        self.puts: list[tuple[str, int]] = []

    def put(self, item: Any) -> None:
        if item is not None:
            self.puts.append((item[0].label, self.bus.last_seq))
        super().put(item)


async def test_the_read_for_a_decisions_calls_begins_before_the_decision_is_recorded() -> None:
    budget = Budget(
        max_turns=50, max_tool_calls=50, max_tokens=10**9, max_cost_usd=100.0, deadline_s=600
    )
    config = RunConfig(env="job", model="polls", goal="the job finishes", budget=budget)
    bus, recorder = EventBus(), Recorder()
    bus.subscribe(recorder)
    runtime = Runtime(config, Job(Path("."), {}), Polls(), AutoApprover(), bus=bus)
    runtime.env_thread._jobs = jobs = Puts(bus)
    outcome = await runtime.run()
    assert outcome.stop_reason is StopReason.GOAL_MET, outcome.detail
    decided = [e.seq for e in recorder.events if isinstance(e, DecisionMade)]
    read_as = [seq for label, seq in jobs.puts if label == "fingerprint"]
    assert len(read_as) == len(decided) == 3  # one read a call, as before
    # each begun before its decision's event, after the one before it
    assert [seq + 1 for seq in read_as] == decided
    # and each call proposed on the state as it was after its reply: 0, 1, 2 polls
    states = []
    for polls in (0, 1, 2):
        runtime.env.data["polls"] = polls
        states.append(runtime.state_reads.read()[1])
    assert [e.state_hash for e in recorder.kinds("call_proposed")] == states


class CancelledWhileItThinks(Polls):
    """The operator cancels (stop after current tools) while the model's second call runs."""

    def __init__(self) -> None:
        self.runtime: Runtime | None = None

    async def complete(self, request: ModelRequest) -> ModelReply:
        reply = await super().complete(request)
        if reply.tool_calls and reply.tool_calls[0].id == "p1" and self.runtime is not None:
            self.runtime.cancel(by="operator")
        return reply


async def test_no_read_is_begun_for_calls_a_cancel_that_came_meanwhile_stops() -> None:
    budget = Budget(
        max_turns=50, max_tool_calls=50, max_tokens=10**9, max_cost_usd=100.0, deadline_s=600
    )
    config = RunConfig(env="job", model="polls", goal="the job finishes", budget=budget)
    bus = EventBus()
    model = CancelledWhileItThinks()
    runtime = model.runtime = Runtime(config, Job(Path("."), {}), model, AutoApprover(), bus=bus)
    runtime.env_thread._jobs = jobs = Puts(bus)
    outcome = await runtime.run()
    assert outcome.stop_reason is StopReason.CANCELLED
    assert outcome.detail == "stopped after current tools by operator"  # nothing abandoned
    assert outcome.tool_calls == 1
    # the first call's read; none for the second reply's calls, which never run
    assert [label for label, _ in jobs.puts].count("fingerprint") == 1


def _reads(env: Environment) -> StateReads:
    return StateReads(env, EnvThread(), lambda awaitable: awaitable)


async def _ended(thread: EnvThread) -> None:
    while thread.stray is not None:
        await asyncio.sleep(0.001)


async def test_a_read_begun_before_a_forget_is_not_taken_and_the_state_is_read_again() -> None:
    env = Job(Path("."), {})
    reads = _reads(env)
    try:
        reads.read_ahead()
        await _ended(reads.env_thread)  # the read is done: {"polls": 0}
        env.data["polls"] = 5  # changed while the run was paused
        reads.forget()  # the pause's end (`operator_time`)
        assert await reads.state_hash() == reads.read()[1]
        assert reads.reads == 1  # the read begun early is not counted as one taken
    finally:
        reads.env_thread.close()


async def test_a_read_begun_ahead_is_the_one_taken() -> None:
    env = Job(Path("."), {})
    reads = _reads(env)
    try:
        reads.read_ahead()
        await _ended(reads.env_thread)
        begun = reads.read()[1]
        env.data["polls"] = 5  # after the read: the call is proposed on what was read
        assert await reads.state_hash() == begun
        assert reads.reads == 1
    finally:
        reads.env_thread.close()


async def test_a_rebuilt_runs_reads_served_from_its_log_are_never_begun_early() -> None:
    """A log's reads are served in its order: one begun early and dropped would shift every
    later one. Once the log is live (read through), reads begin early again."""
    env = Job(Path("."), {})
    reads = _reads(env)
    reads.__class__ = RecordedReads
    assert isinstance(reads, RecordedReads)
    log = SimpleNamespace(live=False, read=lambda: ({"polls": 9}, "logged"))
    reads.recording(
        SimpleNamespace(emit=lambda *a, **k: None, config=SimpleNamespace(run_id="r")),  # type: ignore[arg-type]
        log,  # type: ignore[arg-type]
    )
    try:
        reads.read_ahead()
        assert reads.env_thread.stray is None and reads.env_thread._ahead is None
        log.live = True
        reads.read_ahead()
        assert reads.env_thread._ahead is not None
    finally:
        reads.env_thread.close()


async def test_a_started_job_waits_for_env_code_running_and_a_call_drops_it() -> None:
    thread = EnvThread()
    release = threading.Event()
    ran: list[str] = []
    try:
        running = asyncio.create_task(thread.call("slow", lambda: release.wait(30)))
        await asyncio.sleep(0.01)
        assert not thread.start("read", lambda: ran.append("early"))  # one at a time
        release.set()
        await running
        assert thread.start("read", lambda: ran.append("read"))
        # a call before it is taken waits for it, and its result is dropped
        assert await thread.call("other", lambda: ran.append("other")) is None
        assert ran == ["read", "other"]

        def again() -> str:
            ran.append("again")
            return "fresh"

        assert await thread.after("read", again) == "fresh"
    finally:
        release.set()
        thread.close()
