"""An MCP server that changes under a run (`tests/envs/mcp_changes/server.py`):

- its tools listed again on `notifications/tools/list_changed`: a read it makes less safe is
  a write from then on, asked for; a write it marks read-only stays a write; a tool it drops
  fails its calls by name; one it adds is not offered; each said as a finding;
- its snapshot resource subscribed to, and an update it sends (or a resources `list_changed`)
  makes the next look read the state again under `state_changes = "by_writes"`;
- a read that times out is tried again at most once (`core/dispatcher.py`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import Recorder

from loopdeck.core.events import (
    ApprovalRequested,
    CallProposed,
    CallStatus,
    Event,
    EventBus,
    Finding,
    RunStopped,
    ToolFinished,
)
from loopdeck.core.recorded_inputs import ReplayBus, record_inputs
from loopdeck.core.replay_log import ReplayLog
from loopdeck.core.tools import ErrorCode, ToolError
from loopdeck.mcp_env.listing import ServerTool
from loopdeck.mcp_env.tool_changes import ToolChanges
from loopdeck.operator.launch import RunOptions, prepare_run

ENV = Path(__file__).parent / "envs" / "mcp_changes"


async def _run(script: str, approve: str = "auto") -> Any:
    bus = EventBus()
    bus.subscribe(Recorder())
    options = RunOptions(env=str(ENV), script=script, approve=approve)
    prepared = prepare_run(options, bus=bus)
    try:
        return await prepared.runtime.run()
    finally:
        prepared.cleanup()


async def test_a_read_the_server_makes_destructive_mid_run_is_asked_for_as_a_write() -> None:
    outcome = await _run("turned")
    calls = {call.tool: call for call in outcome.calls}
    assert calls["turn"].status is CallStatus.EXECUTED and calls["turn"].decided_by is None
    peek = calls["peek"]
    assert peek.risk == "write" and peek.decided_by is not None, peek  # asked, then run
    assert peek.status is CallStatus.EXECUTED, peek.result
    assert "server changed its hints during the run" in peek.risk_source
    # A write the server later marks read-only is still a write: asked for.
    assert calls["save"].risk == "write" and calls["save"].decided_by is not None
    gone = calls["gone"]
    assert gone.status is CallStatus.FAILED and gone.result is not None
    assert gone.result["error"]["message"].startswith("gone not called: MCP server")
    assert "no longer lists it" in gone.result["error"]["message"]
    said = [f for f in outcome.findings if "MCP server" in f]
    assert any(
        "changed its tool peek during the run (readOnlyHint was true, now false;"
        " destructiveHint was absent, now true): it was a read, and is a write from now on" in f
        for f in said
    ), said
    assert sum("no longer lists its tool gone" in f for f in said) == 1, said
    assert sum("now lists a tool fresh, which this run does not offer" in f for f in said) == 1
    assert not any("tool save" in f for f in said), said


async def test_a_read_made_a_write_is_denied_under_deny() -> None:
    outcome = await _run("turned", approve="deny")
    calls = {call.tool: call for call in outcome.calls}
    assert calls["peek"].status is CallStatus.REJECTED  # asked for, and denied: never run


def _tool(name: str, read_only: bool | None, destructive: bool | None = None) -> ServerTool:
    return ServerTool(name, name, {"type": "object"}, read_only, destructive)


def _specs_made(replaced: list[dict[str, Any]]) -> ToolChanges:
    def as_write(tool: ServerTool, source: str) -> Any:
        return f"{tool.name} as a write: {source}"

    start = [_tool("peek", True), _tool("save", None)]
    changes = ToolChanges(
        "srv", start, {"peek": "read", "save": "write"}, start, lambda *_: None, as_write
    )
    changes.watch(replaced.append)
    return changes


def test_a_call_made_as_a_read_before_the_run_took_the_change_is_refused() -> None:
    """The server said the change before the run took it: a call made as a read is refused,
    nothing run; made as the write it now is, it goes on."""
    replaced: list[dict[str, Any]] = []
    changes = _specs_made(replaced)
    changes.listed([_tool("peek", True, destructive=True), _tool("save", True)])
    assert [list(specs) for specs in replaced] == [["peek"]]  # save is never made a read
    with pytest.raises(ToolError) as refused:
        changes.vet("peek", "read")
    assert refused.value.applied is False and refused.value.code is ErrorCode.PERMISSION_DENIED
    assert "it is a write from now on" in refused.value.message
    changes.vet("peek", "write")
    changes.vet("save", "write")


def test_a_tool_that_comes_back_is_callable_again_and_never_safer() -> None:
    replaced: list[dict[str, Any]] = []
    changes = _specs_made(replaced)
    changes.listed([_tool("save", None)])
    with pytest.raises(ToolError, match="peek not called: MCP server `srv` no longer lists it"):
        changes.vet("peek", None)
    changes.listed([_tool("peek", False), _tool("save", None)])
    changes.vet("peek", "write")
    changes.listed([_tool("peek", True), _tool("save", None)])  # read-only again: still a write
    with pytest.raises(ToolError):
        changes.vet("peek", "read")


@pytest.mark.parametrize("script", ["ticked", "shifted"])
async def test_a_resource_the_server_says_changed_is_read_again(script: str) -> None:
    """Two calls of a read-only tool that changes the state: the server says so (an update
    of the subscribed snapshot resource, or its resources' list changed), so the second call
    is from a new state, not a repeat of the first."""
    outcome = await _run(script)
    first, second = outcome.calls
    assert first.state_hash != second.state_hash
    assert [c.status for c in outcome.calls] == [CallStatus.EXECUTED, CallStatus.EXECUTED]


async def test_an_mcp_read_that_times_out_is_tried_again_once() -> None:
    outcome = await _run("slow")
    [call] = outcome.calls
    assert call.status is CallStatus.FAILED
    assert call.result is not None and call.result["error"]["code"] == "TIMEOUT"
    assert call.retries == 1


async def test_a_tools_list_that_cannot_be_read_keeps_the_next_call_from_running() -> None:
    """The server said its tools changed, and its new list is not a list the SDK can read
    (its ValidationError): the list stays stale, the failure is said, and the next call is
    not run on the list the server said is out of date."""
    from types import SimpleNamespace

    import pydantic
    from mcp.types import ToolListChangedNotification

    from loopdeck.core.tools import ToolError
    from loopdeck.mcp_env.server_changes import ServerChanges

    class Listing(pydantic.BaseModel):
        tools: list[str]

    class Session:
        async def list_tools(self, params: object = None) -> object:
            return Listing.model_validate({"tools": "not a list"})

    said: list[str] = []
    changes = ServerChanges("s", SimpleNamespace(call_timeout_s=5.0, snapshot=None), said.append)  # type: ignore[arg-type]
    changes.session = Session()  # type: ignore[assignment]
    await changes.noticed(ToolListChangedNotification())
    await changes._relisted()
    ran: list[str] = []

    async def call() -> str:
        ran.append("ran")
        return "ok"

    with pytest.raises(ToolError) as refused:
        await changes.vetted("t", "read", call)
    assert ran == []
    assert "listing them again failed" in str(refused.value), refused.value
    assert any("its answer was not a list: ValidationError" in words for words in said), said


async def _whole_turned(env: Path = ENV) -> list[Event]:
    bus = EventBus()
    events: list[Event] = []
    bus.subscribe(events.append)
    prepared = prepare_run(RunOptions(env=str(env), script="turned", approve="auto"), bus=bus)
    record_inputs(prepared.runtime)
    try:
        await prepared.runtime.run()
    finally:
        prepared.cleanup()
    return events


async def _rebuilt(
    log: list[Event], env: Path = ENV, fork: str | None = None
) -> tuple[ReplayLog, list[Event]]:
    """The run rebuilt from `log` on a server of its own, as it starts: `peek` read-only, as
    a server that put its hint back says. `fork`: a fork's id, rebuilt from `log` as its
    source's (its own log written from its first event: `events`)."""
    bus = ReplayBus(forward=fork is not None)
    events: list[Event] = []
    bus.subscribe(events.append)
    run_id = fork or log[0].run_id
    options = RunOptions(env=str(env), script="turned", approve="auto", run_id=run_id)
    prepared = prepare_run(options, bus=bus)
    replay = ReplayLog(log)
    replay.free = fork is not None
    bus.follow(replay)
    record_inputs(prepared.runtime, replay)
    try:
        await prepared.runtime.run()
    finally:
        prepared.cleanup()
    return replay, events


@pytest.mark.parametrize("cut", ["before_peek", "after_peek"])
async def test_a_rebuilt_run_keeps_the_writes_its_server_made_of_its_reads(cut: str) -> None:
    """Rebuilt from its log (another worker, a server that says `peek` is read-only again):
    `peek` is a write from where the log's finding said so, asked for before it runs, whether
    the log ends before its call or after it (served as asked)."""
    whole = await _whole_turned()
    peek = next(e for e in whole if isinstance(e, CallProposed) and e.tool == "peek")
    said = next(e for e in whole if isinstance(e, Finding) and "tool peek" in e.text)
    assert said.seq < peek.seq and peek.risk == "write"
    at = whole.index(peek)
    if cut == "after_peek":
        at = next(i for i, e in enumerate(whole) if isinstance(e, ToolFinished) and i > at) + 1
    replay, events = await _rebuilt(whole[:at])
    assert replay.diverged is None, replay.diverged
    proposed = {e.tool: e for e in events if isinstance(e, CallProposed)}
    live = "peek" if cut == "before_peek" else "save"
    assert proposed[live].risk == "write", proposed[live]
    asked = {e.call_id for e in events if isinstance(e, ApprovalRequested)}
    assert proposed[live].call_id in asked
    stop = events[-1]
    assert isinstance(stop, RunStopped) and "could not be rebuilt" not in stop.detail
