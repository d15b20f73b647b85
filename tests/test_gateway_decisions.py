"""A write in the model's answer is held for the operator before the agent sees it (the test
plays the agent through the gateway, `gateway_clients.py`): approved, it is released as it
was; edited, with the operator's input (recorded with both); rejected, replaced by text with
the operator's reason, so the agent never runs it and the model reads why (told by the gateway
itself when nothing else of the answer goes to the agent). Several tool uses
in one answer are decided together and released in one answer. A read goes out at once."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from anthropic_loopback import AnthropicLoopback
from gateway_clients import Client
from gateway_helpers import Decider, GatewayRun, approve, door_command, door_run, until
from loopback_server import Call, Text
from openai_loopback import USAGE_IN, USAGE_OUT, Calls, OpenAILoopback

from loopdeck.core.approvals import ApprovalDecision, ApprovalRequest
from loopdeck.core.events import (
    ApprovalDecided,
    ApprovalRequested,
    CallProposed,
    GuardTripped,
    ToolFinished,
)
from loopdeck.core.states import StopReason
from loopdeck.gateway.config import RETELLS
from loopdeck.operator.runview import RunView

FORMATS = ("chat", "responses", "messages")
WRITE = Call("Write", {"file_path": "a.txt", "content": "from the model\n"}, text="On it.")


@pytest.fixture(autouse=True)
def upstream_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-upstream-openai")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-upstream-anthropic")


def upstream_for(api: str, script: list[Any]) -> tuple[Any, str]:
    if api == "messages":
        return AnthropicLoopback(script), "anthropic/claude-loop"
    return OpenAILoopback(script), "openai/loop-model"


async def first_answer(
    tmp_path: Path, api: str, decider: Decider, script: list[Any]
) -> tuple[GatewayRun, Any, list[Any], list[dict[str, Any]]]:
    """The run, its outcome, the answer the agent got to its first call, and the bodies the
    upstream was asked."""
    work = tmp_path / "work"
    work.mkdir()
    door_file = tmp_path / "door.json"
    loopback, model = upstream_for(api, script)
    with loopback as upstream:
        run = GatewayRun(work, door_command(door_file), model, upstream.url, approver=decider)
        async with door_run(run, door_file) as door:
            client = Client(door.told, api, stream=True)
            client.user("write a.txt")
            answer = await client.ask()
        outcome = await run.outcome()
        assert upstream.problems() == []
        asked = [seen.body for seen in upstream.main_requests()]
    return run, outcome, [answer], asked


def reject(request: ApprovalRequest) -> ApprovalDecision:
    return ApprovalDecision(call_id=request.call_id, approved=False, reason="not a.txt", by="test")


@pytest.mark.parametrize("api", FORMATS)
async def test_a_rejected_write_never_reaches_the_agent_and_the_model_is_told_the_reason(
    api: str, tmp_path: Path
) -> None:
    """The answer's only tool use is rejected: rather than a text answer the agent would end on
    (the model never hearing why), the gateway asks the model again with the operator's reason
    as the write's result, counted as a model call; the agent gets the follow-up, the
    gateway's words first."""
    script = [WRITE, Text("I will leave a.txt alone.")]
    run, outcome, [answer], asked = await first_answer(tmp_path, api, Decider(reject), script)
    assert answer.uses == []  # nothing for the agent to run
    assert answer.text.startswith("On it.")
    assert "the operator rejected Write: a.txt; it was not run" in answer.text
    assert "Their reason: not a.txt" in answer.text
    assert answer.text.endswith("I will leave a.txt alone.")
    first, told = asked
    assert "not a.txt" not in json.dumps(first) and "Their reason: not a.txt" in json.dumps(told)
    assert result_of(api, told) == (
        "loopdeck: the operator rejected Write: a.txt; it was not run. Their reason: not a.txt"
    )
    [decided] = run.events(ApprovalDecided)
    assert not decided.approved and decided.reason == "not a.txt"
    [call] = outcome.calls
    assert call.status.value == "rejected"
    assert outcome.model_calls == 2 and outcome.tokens == 2 * (USAGE_IN + USAGE_OUT)


async def test_a_model_that_proposes_only_rejected_writes_is_told_a_bounded_number_of_times(
    tmp_path: Path,
) -> None:
    """Each follow-up is another rejected write: the gateway asks again at most `RETELLS`
    times, then the agent gets every reason as text."""
    writes = [Call("Write", {"file_path": "a.txt", "content": f"try {n}\n"}) for n in range(9)]
    _, outcome, [answer], asked = await first_answer(tmp_path, "chat", Decider(reject), writes)
    assert len(asked) == 1 + RETELLS
    assert answer.uses == [] and answer.text.count("Their reason: not a.txt") == 1 + RETELLS
    assert [c.status.value for c in outcome.calls] == ["rejected"] * (1 + RETELLS)


def result_of(api: str, body: dict[str, Any]) -> str:
    """The last tool result a request carries, in its format."""
    if api == "chat":
        return str(body["messages"][-1]["content"])
    if api == "responses":
        return str(body["input"][-1]["output"])
    [block] = body["messages"][-1]["content"]
    assert block["is_error"] is True
    return str(block["content"])


@pytest.mark.parametrize("api", FORMATS)
async def test_an_approved_write_is_released_as_the_model_said_it(api: str, tmp_path: Path) -> None:
    run, _, [answer], _ = await first_answer(tmp_path, api, Decider(approve), [WRITE])
    [(_, tool, given)] = answer.uses
    assert (tool, given) == ("Write", {"file_path": "a.txt", "content": "from the model\n"})
    [asked] = run.events(ApprovalRequested)
    assert asked.tool == "Write" and asked.args == given
    assert "+from the model" in asked.diff  # the write's change to the folder, shown


@pytest.mark.parametrize("api", FORMATS)
async def test_an_edited_write_is_released_with_the_operators_input(
    api: str, tmp_path: Path
) -> None:
    edited = {"file_path": "a.txt", "content": "from the operator\n"}

    def edit(request: ApprovalRequest) -> ApprovalDecision:
        return ApprovalDecision(call_id=request.call_id, approved=True, args=edited, by="test")

    run, outcome, [answer], _ = await first_answer(tmp_path, api, Decider(edit), [WRITE])
    [(_, tool, given)] = answer.uses
    assert (tool, given) == ("Write", edited)
    [proposed] = run.events(CallProposed)
    assert proposed.args["content"] == "from the model\n"  # what the model said, kept
    [decided] = run.events(ApprovalDecided)
    assert decided.args == edited  # what the agent runs
    assert decided.changes == ['content: "from the model\\n" → "from the operator\\n"']
    # The call is recorded as it ran: the run's summary (`--json`) and the stored run's view.
    [call] = outcome.summary_json()["calls"]
    assert (call["call_id"], call["args"]) == ("c1", edited)
    view = RunView()
    for event in run.recorder.events:
        view.apply(event)
    assert view.calls["c1"].args == edited


@pytest.mark.parametrize("api", FORMATS)
async def test_an_edited_write_is_keyed_by_the_guard_as_edited(api: str, tmp_path: Path) -> None:
    """The model proposes, from the same folder, the very write the operator made of its
    earlier one: a repeat of the edited call, caught by the guard (naming it)."""
    edited = {"file_path": "a.txt", "content": "from the operator\n"}

    def edit(request: ApprovalRequest) -> ApprovalDecision:
        return ApprovalDecision(call_id=request.call_id, approved=True, args=edited, by="test")

    work = tmp_path / "work"
    work.mkdir()
    (work / "a.txt").write_text(edited["content"])  # the edited write changes nothing
    door_file = tmp_path / "door.json"
    loopback, model = upstream_for(api, [WRITE, Call("Write", edited), Text("Done.")])
    with loopback as upstream:
        run = GatewayRun(work, door_command(door_file), model, upstream.url,
                         approver=Decider(edit))  # fmt: skip
        async with door_run(run, door_file) as door:
            client = Client(door.told, api, stream=False)
            client.user("write a.txt")
            first = await client.ask()
            [(use_id, _, given)] = first.uses
            assert given == edited
            client.results({use_id: "wrote a.txt"})
            second = await client.ask()
            assert second.uses == []
            assert "repeats a call made from this same state" in second.text
        outcome = await run.outcome()
    [tripped] = run.events(GuardTripped)
    [first_call, repeat] = outcome.calls
    assert tripped.call_id == repeat.call_id == "c2"
    assert first_call.args == repeat.args == edited
    assert outcome.stop_reason is StopReason.NO_PROGRESS


async def test_tool_uses_of_one_answer_are_decided_together_and_released_in_one_answer(
    tmp_path: Path,
) -> None:
    """A read and two writes: nothing reaches the agent until both writes are decided; the
    rejected one is replaced, the others released; the model reads the reason next call."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "notes.md").write_text("notes\n")
    door_file = tmp_path / "door.json"
    uses = (
        Call("Read", {"file_path": "notes.md"}),
        Call("Write", {"file_path": "a.txt", "content": "a\n"}),
        Call("Write", {"file_path": "b.txt", "content": "b\n"}),
    )
    both = Calls(uses, text="Three.")
    decider = Decider()
    with OpenAILoopback([both, Text("Done.")]) as upstream:
        run = GatewayRun(work, door_command(door_file), "openai/loop-model", upstream.url,
                         approver=decider)  # fmt: skip
        async with door_run(run, door_file) as door:
            client = Client(door.told, "chat", stream=True)
            client.user("write both")
            asking = asyncio.ensure_future(client.ask())
            await until("the first write asked", lambda: "c2" in decider.waiting)
            assert [r.call_id for r in decider.asked] == ["c2"] and not asking.done()
            decider.answer("c2", approved=False, reason="not a", by="test")
            await until("the second write asked", lambda: "c3" in decider.waiting)
            assert not asking.done()  # the read and the decided write are still held
            decider.answer("c3", approved=True, by="test")
            answer = await asking
            assert [(tool, given["file_path"]) for _, tool, given in answer.uses] == [
                ("Read", "notes.md"), ("Write", "b.txt")]  # fmt: skip
            assert "rejected Write: a.txt" in answer.text and "not a" in answer.text
            (work / "b.txt").write_text("b\n")
            client.results({answer.uses[0][0]: "notes\n", answer.uses[1][0]: "wrote b.txt"})
            assert (await client.ask()).text == "Done."
        await run.outcome()
        told = upstream.main_requests()[1].body["messages"]
    assert any("Their reason: not a" in str(m.get("content")) for m in told)  # the model reads it
    finished = {e.call_id: e.result for e in run.events(ToolFinished)}
    assert finished["c1"] == {"ok": True, "data": {"output": "notes\n"}}
    assert finished["c2"]["error"]["code"] == "REJECTED"
    assert finished["c3"] == {"ok": True, "data": {"output": "wrote b.txt"}}


async def test_a_write_is_shown_and_recorded_whole_and_keyed_without_its_per_call_fields(
    tmp_path: Path,
) -> None:
    """What the agent renews per call (`request_id`, `timestamp` by name) is left out of the
    guard's key only: the operator approves, and the record keeps, the whole input the agent
    runs, as ACP's are."""
    first = {"file_path": "a.txt", "content": "x\n", "request_id": "r-1", "timestamp": "09:00"}
    again = {**first, "request_id": "r-2", "timestamp": "09:01"}
    work = tmp_path / "work"
    work.mkdir()
    (work / "a.txt").write_text("x\n")  # the write changes nothing: the second is a repeat
    door_file = tmp_path / "door.json"
    loopback, model = upstream_for("chat", [Call("Write", first), Call("Write", again)])
    with loopback as upstream:
        run = GatewayRun(work, door_command(door_file), model, upstream.url,
                         approver=Decider(approve))  # fmt: skip
        async with door_run(run, door_file) as door:
            client = Client(door.told, "chat", stream=False)
            client.user("write a.txt")
            answer = await client.ask()
            [(use_id, _, given)] = answer.uses
            assert given == first
            client.results({use_id: "wrote a.txt"})
            second = await client.ask()
            assert second.uses == []
            assert "repeats a call made from this same state" in second.text
        outcome = await run.outcome()
    [asked] = run.events(ApprovalRequested)
    assert asked.args == first  # all of what runs, shown
    [tripped] = run.events(GuardTripped)
    [one, repeat] = outcome.calls
    assert (one.args, repeat.args) == (first, again)
    assert tripped.call_id == "c2" and one.fingerprint == repeat.fingerprint
