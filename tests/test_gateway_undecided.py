"""Nothing of an answer reaches the agent undecided: several choices (`n`) and the legacy
`functions` are refused by name; the Responses API's built-in calls the client runs
(`apply_patch_call`, `shell_call`, an unknown `*_call`) are calls of the run, held as writes
(a request declaring the computer tool is refused by name: no screenshot answers its call);
a call replaced for an agent whose upstream keeps the conversation (`previous_response_id`)
is answered there with its reason; two copies of one tool use in an answer are one call, the
run going on. An upstream's failure reaches the agent with its own status and `retry-after`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from gateway_clients import Client
from gateway_helpers import Decider, GatewayRun, door_command, door_run
from gateway_raw_upstream import (
    RawUpstream,
    chat,
    failing,
    item,
    responses,
    said,
    tool_call,
)
from loopback_server import Call, Text
from openai_loopback import Calls, OpenAILoopback

from loopdeck.core.approvals import ApprovalDecision, ApprovalRequest
from loopdeck.core.events import CallProposed, CallStatus, GuardTripped, ToolFinished
from loopdeck.core.states import StopReason

OPENAI_MODEL = "openai/loop-model"
WRITE_ARGS = {"file_path": "a.txt", "content": "a\n"}


@pytest.fixture(autouse=True)
def upstream_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-upstream-openai")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-upstream-anthropic")


def denied(request: ApprovalRequest) -> ApprovalDecision:
    """As `--approve deny` decides."""
    return ApprovalDecision(call_id=request.call_id, approved=False, reason="denied", by="test")


def folder(tmp_path: Path) -> Path:
    work = tmp_path / "work"
    work.mkdir()
    return work


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
async def test_several_choices_and_legacy_functions_are_refused_by_name(
    stream: bool, tmp_path: Path
) -> None:
    """`n` 2 would give the agent a second choice whose tool calls nobody decided; the legacy
    `functions` a `function_call` the gateway would not see: each refused with a 400 the SDK
    reads, naming it, never asked upstream. An answer with several choices anyway goes out
    with its first (decided) alone."""
    from openai import BadRequestError

    door_file = tmp_path / "door.json"
    write = tool_call("Write", WRITE_ARGS)
    replies = [chat({"content": "one"}, {"content": None, "tool_calls": [write]})]
    with RawUpstream(replies) as upstream:
        run = GatewayRun(folder(tmp_path), door_command(door_file), OPENAI_MODEL,
                         upstream.root + "/v1", approver=Decider(denied))  # fmt: skip
        async with door_run(run, door_file) as door:
            client = door.openai()
            asked: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "w"}]}
            function = {"name": "Write", "parameters": {"type": "object"}}
            for extra, named in (({"n": 2}, "`n` 2"), ({"functions": [function]}, "`functions`"),
                                 ({"function_call": "auto"}, "`function_call`")):  # fmt: skip
                with pytest.raises(BadRequestError) as refused:
                    await client.chat.completions.create(**asked, **extra, stream=stream)
                assert named in refused.value.message
            assert upstream.bodies == []  # none of them went upstream
            answer = await client.chat.completions.create(**asked)
        await run.outcome()
    assert [c.message.content for c in answer.choices] == ["one"]
    assert run.events(CallProposed) == []


async def test_a_request_declaring_the_computer_tool_is_refused_by_name(tmp_path: Path) -> None:
    """A `computer_call` taken out could be answered upstream only with a screenshot: a
    request declaring the computer tool is refused with a 400 naming it, never asked
    upstream."""
    from openai import BadRequestError

    door_file = tmp_path / "door.json"
    computer = {"type": "computer_use_preview", "display_width": 1024, "display_height": 768,
                "environment": "linux"}  # fmt: skip
    with RawUpstream([responses(said("Done."))]) as upstream:
        run = GatewayRun(folder(tmp_path), door_command(door_file), OPENAI_MODEL,
                         upstream.root + "/v1", approver=Decider(denied))  # fmt: skip
        async with door_run(run, door_file) as door:
            client = door.openai()
            with pytest.raises(BadRequestError) as refused:
                await client.responses.create(model="m", input="click", tools=[computer])
            assert "`computer_use_preview`" in refused.value.message
            assert upstream.bodies == []
            answer = await client.responses.create(model="m", input="hi")
        await run.outcome()
    assert answer.output_text == "Done."


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
async def test_the_responses_built_in_calls_are_held_as_writes(
    stream: bool, tmp_path: Path
) -> None:
    """`apply_patch_call`, `shell_call` and a call kind loopdeck does not know, every write
    denied: each proposed as a write (its input shown), refused, never reaching the
    agent; the model is told each reason in the output its kind takes."""
    door_file = tmp_path / "door.json"
    patch = item("apply_patch_call", operation={"type": "create_file", "path": "a.txt",
                                                "diff": "+a\n"})  # fmt: skip
    shell = item("shell_call", action={"commands": ["touch a.txt"]})
    other = item("teleport_call", target="a.txt")
    replies = [responses(patch, shell, other), responses(said("Not done."))]
    with RawUpstream(replies) as upstream:
        run = GatewayRun(folder(tmp_path), door_command(door_file), OPENAI_MODEL,
                         upstream.root + "/v1", approver=Decider(denied))  # fmt: skip
        async with door_run(run, door_file) as door:
            client = door.openai()
            asked = {"model": "m", "input": "write a.txt"}
            if stream:
                async with client.responses.stream(**asked) as events:
                    async for _ in events:
                        pass
                    response = await events.get_final_response()
            else:
                response = await client.responses.create(**asked)
        await run.outcome()
        retold = upstream.bodies[1]["input"]
    assert {i.type for i in response.output} == {"message"}  # the gateway's words, the answer
    assert "Not done." in response.output_text
    proposed = run.events(CallProposed)
    assert [(p.tool.split(":")[0], p.risk) for p in proposed] == [
        ("apply_patch", "write"), ("shell", "write"), ("teleport_call", "write")
    ]  # fmt: skip
    assert proposed[0].args["path"] == "a.txt" and proposed[2].args["target"] == "a.txt"
    assert {f.status for f in run.events(ToolFinished)} == {CallStatus.REJECTED}
    assert upstream.problems == []  # every item of the retold request one the API takes
    outputs = {i["type"]: i for i in retold if str(i.get("type")).endswith("_output")}
    assert set(outputs) == {"apply_patch_call_output", "shell_call_output"}
    assert outputs["apply_patch_call_output"]["status"] == "failed"
    assert "loopdeck:" in outputs["apply_patch_call_output"]["output"]
    assert "loopdeck:" in outputs["shell_call_output"]["output"][0]["stderr"]
    # The API has no output item for a kind it does not list: the model reads it as the
    # harness's developer message, naming the call.
    [told] = [i for i in retold if i.get("role") == "developer"]
    assert told["type"] == "message" and other["call_id"] in told["content"]
    assert "`teleport_call`" in told["content"] and "denied" in told["content"]


async def test_a_replaced_call_is_answered_where_the_upstream_keeps_the_conversation(
    tmp_path: Path,
) -> None:
    """An agent going on with `previous_response_id`: the write rejected in its copy still
    stands in the upstream's stored answer; its next request gets the write's output (the
    reason) added, so the upstream takes it and the model reads why."""
    door_file = tmp_path / "door.json"
    write = item("function_call", name="Write", arguments='{"file_path": "a.txt"}')
    read = item("function_call", name="Read", arguments='{"file_path": "b.txt"}')
    replies = [responses(write, read), responses(said("Understood."))]
    with RawUpstream(replies) as upstream:
        run = GatewayRun(folder(tmp_path), door_command(door_file), OPENAI_MODEL,
                         upstream.root + "/v1", approver=Decider(denied))  # fmt: skip
        async with door_run(run, door_file) as door:
            client = door.openai()
            first = await client.responses.create(model="m", input="write a.txt")
            [read_call] = [i for i in first.output if i.type == "function_call"]
            assert read_call.name == "Read"
            output = {"type": "function_call_output", "call_id": read_call.call_id,
                      "output": "b"}  # fmt: skip
            second = await client.responses.create(
                model="m", previous_response_id=first.id, input=[output]
            )
        await run.outcome()
        assert upstream.problems == []
        went_on = upstream.bodies[1]["input"]
    assert second.output_text == "Understood."
    [owed] = [i for i in went_on if i["call_id"] == write["call_id"]]
    assert owed["type"] == "function_call_output" and "loopdeck:" in owed["output"]


async def test_the_owed_outputs_go_with_the_retry_of_a_failed_call(tmp_path: Path) -> None:
    """The request going on from an answer with a replaced call fails upstream (a 429 passed
    to the agent, which retries): the retry still carries the replaced call's output, so the
    upstream takes it."""
    from openai import RateLimitError

    door_file = tmp_path / "door.json"
    write = item("function_call", name="Write", arguments='{"file_path": "a.txt"}')
    read = item("function_call", name="Read", arguments='{"file_path": "b.txt"}')
    busy = {"error": {"message": "Slow down", "type": "rate_limit_error"}}
    replies = [responses(write, read), failing(429, busy, {"retry-after": "1"}),
               responses(said("Understood."))]  # fmt: skip
    with RawUpstream(replies) as upstream:
        run = GatewayRun(folder(tmp_path), door_command(door_file), OPENAI_MODEL,
                         upstream.root + "/v1", approver=Decider(denied))  # fmt: skip
        async with door_run(run, door_file) as door:
            client = door.openai()
            first = await client.responses.create(model="m", input="write a.txt")
            [read_call] = [i for i in first.output if i.type == "function_call"]
            output = {"type": "function_call_output", "call_id": read_call.call_id,
                      "output": "b"}  # fmt: skip
            went_on = {"model": "m", "previous_response_id": first.id, "input": [output]}
            with pytest.raises(RateLimitError):
                await client.responses.create(**went_on)
            second = await client.responses.create(**went_on)
        await run.outcome()
        assert upstream.problems == []
        retried = upstream.bodies[2]["input"]
    assert second.output_text == "Understood."
    [owed] = [i for i in retried if i["call_id"] == write["call_id"]]
    assert owed["type"] == "function_call_output" and "loopdeck:" in owed["output"]


async def test_two_copies_of_one_tool_use_in_an_answer_are_one_call(tmp_path: Path) -> None:
    """The model asks for the same write twice in one answer: the first is decided and goes
    out, the second is replaced by text saying so (nothing has run from that state yet: no
    repeat, no stop); the run goes on, the write's result recorded, its goal met."""
    door_file = tmp_path / "door.json"
    work = folder(tmp_path)
    write = Call("Write", {"file_path": "done.txt", "content": "done\n"})
    check = ["sh", "-c", "test -f done.txt"]
    with OpenAILoopback([Calls((write, write), "Twice."), Text("Done.")]) as upstream:
        run = GatewayRun(work, door_command(door_file), OPENAI_MODEL, upstream.url,
                         check=check)  # fmt: skip
        async with door_run(run, door_file) as door:
            client = Client(door.told, "chat", stream=True)
            client.user("write done.txt")
            answer = await client.ask()
            [(use_id, _, _)] = answer.uses
            assert "the same call as c1 in this same answer" in answer.text
            (work / "done.txt").write_text("done\n")
            client.results({use_id: "wrote done.txt"})
            assert (await client.ask()).text == "Done."
        outcome = await run.outcome()
        assert upstream.problems() == []
    assert outcome.stop_reason is StopReason.GOAL_MET, outcome.detail
    assert run.events(GuardTripped) == []
    statuses = [(f.call_id, f.status) for f in run.events(ToolFinished)]
    assert statuses == [("c2", CallStatus.REFUSED_DUPLICATE), ("c1", CallStatus.EXECUTED)]


async def test_the_copy_of_a_rejected_call_says_neither_is_carried_out(tmp_path: Path) -> None:
    """The same write twice in one answer, the first rejected: the copy's text says what
    became of the first (not carried out), never that it is."""
    door_file = tmp_path / "door.json"
    one, two = tool_call("Write", WRITE_ARGS), tool_call("Write", WRITE_ARGS)
    replies = [chat({"content": None, "tool_calls": [one, two]}), chat({"content": "Not done."})]
    with RawUpstream(replies) as upstream:
        run = GatewayRun(folder(tmp_path), door_command(door_file), OPENAI_MODEL,
                         upstream.root + "/v1", approver=Decider(denied))  # fmt: skip
        async with door_run(run, door_file) as door:
            client = door.openai()
            await client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "write a.txt"}]
            )
        await run.outcome()
        retold = upstream.bodies[1]["messages"]
    said = {m["tool_call_id"]: m["content"] for m in retold if m.get("role") == "tool"}
    assert "the same call as c1" in said[two["id"]]
    assert "neither is carried out (c1 was not: rejected)" in said[two["id"]]
    assert "only c1 is carried out" not in said[two["id"]]


@pytest.mark.parametrize(
    ("api", "status"), [("messages", 529), ("chat", 429), ("responses", 503)]
)  # fmt: skip
async def test_an_upstream_failure_keeps_its_status_and_retry_after(
    api: str, status: int, tmp_path: Path
) -> None:
    door_file = tmp_path / "door.json"
    error = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    with RawUpstream([failing(status, error, {"retry-after": "7"})]) as upstream:
        model, base = (
            ("anthropic/claude-loop", upstream.root) if api == "messages"
            else (OPENAI_MODEL, upstream.root + "/v1")
        )  # fmt: skip
        run = GatewayRun(folder(tmp_path), door_command(door_file), model, base)
        async with door_run(run, door_file) as door:
            url, headers, body = _raw(api, door.told)
            async with httpx.AsyncClient(timeout=60) as http:
                reply = await http.post(url, json=body, headers=headers)
        await run.outcome()
    assert reply.status_code == status, reply.text
    assert reply.headers.get("retry-after") == "7"
    assert "Overloaded" in reply.text


def _raw(api: str, told: dict[str, Any]) -> tuple[str, dict[str, str], dict[str, Any]]:
    if api == "messages":
        headers = {"x-api-key": told["ANTHROPIC_API_KEY"], "anthropic-version": "2023-06-01"}
        body = {"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}
        return told["ANTHROPIC_BASE_URL"] + "/v1/messages", headers, body
    headers = {"authorization": f"Bearer {told['OPENAI_API_KEY']}"}
    if api == "chat":
        body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
        return told["OPENAI_BASE_URL"] + "/chat/completions", headers, body
    return told["OPENAI_BASE_URL"] + "/responses", headers, {"model": "m", "input": "hi"}
