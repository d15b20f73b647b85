"""A write in the model's answer is held for the operator before the agent sees it (the test
plays the agent through the gateway, `gateway_clients.py`): approved, it is released as it
was; edited, with the operator's input (recorded with both); rejected, replaced by text with
the operator's reason, so the agent never runs it and the model reads why. Several tool uses
in one answer are decided together and released in one answer. A read goes out at once."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from anthropic_loopback import AnthropicLoopback
from gateway_clients import Client
from gateway_helpers import Decider, GatewayRun, approve, door_command, door_run, until
from loopback_server import Call, Text
from openai_loopback import Calls, OpenAILoopback

from loopdeck.core.approvals import ApprovalDecision, ApprovalRequest
from loopdeck.core.events import ApprovalDecided, ApprovalRequested, CallProposed, ToolFinished

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
) -> tuple[GatewayRun, Any, list[Any]]:
    """The run, its outcome, and the answer the agent got to its first call."""
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
    return run, outcome, [answer]


@pytest.mark.parametrize("api", FORMATS)
async def test_a_rejected_write_never_reaches_the_agent_and_says_the_reason(
    api: str, tmp_path: Path
) -> None:
    def reject(request: ApprovalRequest) -> ApprovalDecision:
        return ApprovalDecision(call_id=request.call_id, approved=False, reason="not a.txt",
                                by="test")  # fmt: skip

    run, outcome, [answer] = await first_answer(tmp_path, api, Decider(reject), [WRITE])
    assert answer.uses == []  # nothing for the agent to run
    assert answer.text.startswith("On it.")
    assert "the operator rejected Write: a.txt; it was not run" in answer.text
    assert "Their reason: not a.txt" in answer.text
    [decided] = run.events(ApprovalDecided)
    assert not decided.approved and decided.reason == "not a.txt"
    [call] = outcome.calls
    assert call.status.value == "rejected"


@pytest.mark.parametrize("api", FORMATS)
async def test_an_approved_write_is_released_as_the_model_said_it(api: str, tmp_path: Path) -> None:
    run, _, [answer] = await first_answer(tmp_path, api, Decider(approve), [WRITE])
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

    run, _, [answer] = await first_answer(tmp_path, api, Decider(edit), [WRITE])
    [(_, tool, given)] = answer.uses
    assert (tool, given) == ("Write", edited)
    [proposed] = run.events(CallProposed)
    assert proposed.args["content"] == "from the model\n"  # what the model said, kept
    [decided] = run.events(ApprovalDecided)
    assert decided.args == edited  # what the agent runs
    assert decided.changes == ['content: "from the model\\n" → "from the operator\\n"']


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
