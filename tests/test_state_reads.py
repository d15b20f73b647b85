"""One state read per change (issue 43): an env whose state changes only by its writes
(`state_changes = "by_writes"`, the MCP kind's default) is read once, then again only after a
tool that may change it or a wait on the operator; an env that does not say so (a Python
env's default), or a kind that drives its own loop, is read on every look."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import Recorder
from pydantic import BaseModel

from loopdeck.core import AutoApprover, Budget, Environment, RunConfig, Runtime, env_jobs, tool
from loopdeck.core.env_thread import EnvThread
from loopdeck.core.events import EventBus
from loopdeck.core.model import ModelReply, ModelRequest, RawToolCall
from loopdeck.core.state_reads import StateReads
from loopdeck.core.states import StopReason
from loopdeck.operator.launch import RunOptions, prepare_run

EDGES = Path(__file__).parent / "envs" / "mcp_edges"


class Labels(env_jobs.Jobs):
    """The env thread's job queue, keeping each hand-over's label ("+" its `then`'s)."""

    def __init__(self) -> None:
        super().__init__()
        self.labels: list[str] = []

    def put(self, item: Any) -> None:
        if item is not None:
            job, _, _, ahead = item
            self.labels.append(job.label + (f"+{ahead.job.label}" if ahead else ""))
        super().put(item)


class Args(BaseModel):
    i: int = 0


class Counting(Environment):
    """A counter: `look` reads it, `bump` adds one; the goal is 2. It says nothing of how its
    state changes."""

    def snapshot(self) -> dict[str, Any]:
        return {"count": self.data.get("count", 0)}

    def unmet(self, snapshot: dict[str, Any]) -> list[str]:
        return [] if snapshot["count"] >= 2 else ["the count is below 2"]

    @tool(args=Args)
    def look(self, args: Args) -> dict[str, Any]:
        """Read the counter."""
        return self.snapshot()

    @tool(args=Args, risk="write")
    def bump(self, args: Args) -> dict[str, Any]:
        """Add one."""
        self.data["count"] = self.data.get("count", 0) + 1
        return self.snapshot()


class Counter(Counting):
    state_changes = "by_writes"


class CountingOnItsOwn(Counting):
    state_changes = "any_time"


class Plays:
    """look, look, bump, look, bump: each with a fresh argument (the guard never trips)."""

    name = "plays"
    turns = ["look", "look", "bump", "look", "bump"]

    async def complete(self, request: ModelRequest) -> ModelReply:
        if request.role == "planner":
            return ModelReply(model=self.name, content="1. Bring the count to 2.")
        turn = sum(1 for m in request.messages if m.get("role") == "assistant")
        name = self.turns[turn % len(self.turns)]  # the goal is met at the fifth
        call = RawToolCall(id=f"p{turn}", name=name, arguments=f'{{"i": {turn}}}')
        return ModelReply(model=self.name, content=None, tool_calls=[call])


def _runtime(env: Environment) -> tuple[Runtime, Labels, Recorder]:
    budget = Budget(
        max_turns=50, max_tool_calls=50, max_tokens=10**9, max_cost_usd=100.0, deadline_s=600
    )
    config = RunConfig(env="counter", model="plays", goal="count to 2", budget=budget)
    bus, recorder = EventBus(), Recorder()
    bus.subscribe(recorder)
    runtime = Runtime(config, env, Plays(), AutoApprover(), bus=bus)
    runtime.env_thread._jobs = labels = Labels()
    return runtime, labels, recorder


async def test_a_state_that_changes_by_writes_is_read_once_per_change() -> None:
    runtime, labels, recorder = _runtime(Counter(Path("."), {}))
    outcome = await runtime.run()
    assert outcome.stop_reason is StopReason.GOAL_MET, outcome.detail
    # a read tool: its own hand-over and nothing else; a write: the state read again for its
    # receipt (the approver was waited on), the read after it in its own hand-over, the goal
    assert labels.labels == [
        "snapshot",  # the planner's look, which the round's start takes too
        "tool look",
        "goal check",  # the first call's state was never checked
        "tool look",
        "fingerprint",  # the approval's receipt, checked against the state as it is now
        "tool bump+snapshot",
        "goal check",
        "tool look",
        "fingerprint",
        "tool bump+snapshot",
        "goal check",
    ]
    hashes = [e.state_hash for e in recorder.kinds("call_proposed")]
    assert hashes[0] == hashes[1] == hashes[2] != hashes[3] == hashes[4]  # bump moved it


async def test_a_state_that_changes_on_its_own_is_read_on_every_look() -> None:
    runtime, labels, _ = _runtime(CountingOnItsOwn(Path("."), {}))
    outcome = await runtime.run()
    assert outcome.stop_reason is StopReason.GOAL_MET, outcome.detail
    assert labels.labels[:5] == [
        "snapshot",  # the planner's look, the round's start
        "fingerprint",
        "tool look+snapshot",
        "goal check",
        "fingerprint",  # the same state, read again
    ]
    # one before each of the five calls, one for each write's receipt
    assert labels.labels.count("fingerprint") == 7


async def test_a_python_env_that_says_nothing_is_read_on_every_look() -> None:
    runtime, labels, _ = _runtime(Counting(Path("."), {}))
    assert runtime.state_reads.changes == "any_time"
    outcome = await runtime.run()
    assert outcome.stop_reason is StopReason.GOAL_MET, outcome.detail
    assert labels.labels.count("fingerprint") == 7


def test_a_state_changes_that_is_neither_is_refused_naming_it() -> None:
    class Odd(Counting):
        state_changes = "sometimes"

    with pytest.raises(ValueError, match=r"Odd.state_changes is 'sometimes'"):
        StateReads(Odd(Path("."), {}), EnvThread(), lambda awaitable: awaitable)


async def test_a_kind_with_its_own_loop_is_read_on_every_look() -> None:
    env = Counter(Path("."), {})
    reads = StateReads(env, EnvThread(), lambda awaitable: awaitable, own_loop=True)
    try:
        first = await reads.state_hash()
        env.data["count"] = 5  # an agent changed it itself, through nothing of loopdeck's
        assert await reads.state_hash() != first
        assert reads.reads == 2
    finally:
        reads.env_thread.close()


async def test_the_state_is_read_again_after_the_operator_was_waited_on() -> None:
    runtime, labels, _ = _runtime(Counter(Path("."), {}))
    try:
        first = await runtime.state_hash()
        runtime.env.data["count"] = 7  # changed while someone decided (a person, a script)
        assert await runtime.state_hash() == first  # nothing of the run's changed it
        with runtime.operator_time("approval"):
            pass
        assert await runtime.state_hash() != first
        assert labels.labels == ["fingerprint", "fingerprint"]
    finally:
        runtime.env_thread.close()


async def test_a_change_said_while_the_state_is_read_has_it_read_again() -> None:
    """The env says its state changed (an MCP server's `resources/updated`, from its
    connection's thread) while a read is under way: that read may predate the change, so it
    is not kept, and the next look reads again."""

    class Told(Counter):
        def snapshot(self) -> dict[str, Any]:
            seen = super().snapshot()
            if self.data.setdefault("said", 0) == 0:
                self.data["said"] = 1
                self.data["count"] = 9  # changed after the read took it
                reads.forget()
            return seen

    env = Told(Path("."), {})
    reads = StateReads(env, EnvThread(), lambda awaitable: awaitable)
    try:
        first = await reads.state_hash()
        assert await reads.state_hash() != first
        assert await reads.state_hash() == await reads.state_hash()  # kept once read whole
        assert reads.reads == 2
    finally:
        reads.env_thread.close()


# -- an MCP server's state --------------------------------------------------------------------
async def _mcp_run(*settings: str) -> tuple[Runtime, Recorder]:
    bus, recorder = EventBus(), Recorder()
    bus.subscribe(recorder)
    options = RunOptions(env=str(EDGES), script="reads", approve="auto", settings=list(settings))
    prepared = prepare_run(options, bus=bus)
    try:
        await prepared.runtime.run()
    finally:
        prepared.cleanup()
    return prepared.runtime, recorder


async def test_an_mcp_servers_state_is_read_again_only_after_a_tool_not_marked_read_only() -> None:
    runtime, recorder = await _mcp_run()
    hashes = [e.state_hash for e in recorder.kinds("call_proposed")]
    assert [e.tool for e in recorder.kinds("call_proposed")] == [
        "peek",
        "touch_log",
        "bump",
        "peek",
    ]
    assert hashes[0] == hashes[1] == hashes[2] != hashes[3]  # bump moved the counter
    # the first look; bump's receipt (after the approver); after bump
    assert runtime.state_reads.reads == 3
    # a read tool overridden to a write by the scenario: read again after it too
    runtime, _ = await _mcp_run("mcp.tools.touch_log.risk=write")
    assert runtime.state_reads.reads == 5  # touch_log: its receipt and the read after it


async def test_an_mcp_state_said_to_change_on_its_own_is_read_on_every_look() -> None:
    runtime, recorder = await _mcp_run("mcp.state_changes=any_time")
    assert len(recorder.kinds("call_proposed")) == 4
    # the round's start, 4 fingerprints, bump's receipt, 4 after, the review's
    assert runtime.state_reads.reads == 11


async def test_a_tool_overridden_to_read_still_has_the_state_read_after_it() -> None:
    """A scenario's `risk = "read"` skips the approval; the server did not say the tool
    changes nothing, so the state is read after it as after any write."""
    runtime, recorder = await _mcp_run("mcp.tools.bump.risk=read")
    assert recorder.kinds("approval_requested") == []
    hashes = [e.state_hash for e in recorder.kinds("call_proposed")]
    assert hashes[2] != hashes[3]
    assert runtime.state_reads.reads == 2  # the first look; after bump
