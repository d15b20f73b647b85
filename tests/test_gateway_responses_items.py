"""The Responses API's items that are neither a function call nor text, each treated as what
it is: a remote MCP server's call (`mcp_approval_request`, run by OpenAI once the client
approves it) is a write held for the operator, the upstream told of a rejection by an
`mcp_approval_response` carrying the reason, and a server declared to run its calls unasked
(`require_approval` not `always`) is refused by name; a `tool_search_call` the client runs
is a read (it searches the agent's own tools), released at once; a `program` (programmatic
tool calling's JavaScript) runs on OpenAI's servers and passes as it is, while the client's
tool it calls is held as any call; an item of a type loopdeck does not know is held as a
write, whatever its name."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from gateway_helpers import Decider, GatewayRun, approve, door_command, door_run
from gateway_raw_upstream import RawUpstream, item, responses, said

from loopdeck.core.approvals import ApprovalDecision, ApprovalRequest
from loopdeck.core.events import CallProposed, CallStatus, Finding, ToolFinished

MODEL = "openai/loop-model"
MCP = {"type": "mcp", "server_label": "wiki", "server_url": "https://mcp.example/wiki"}


@pytest.fixture(autouse=True)
def upstream_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-upstream-openai")


def folder(tmp_path: Path) -> Path:
    work = tmp_path / "work"
    work.mkdir()
    return work


def asked(name: str, **args: Any) -> dict[str, Any]:
    """A remote MCP call OpenAI asks the client to approve."""
    return {"type": "mcp_approval_request", "id": f"mcpr_{name}", "server_label": "wiki",
            "name": name, "arguments": json.dumps(args)}  # fmt: skip


def reads_as_asked(request: ApprovalRequest) -> ApprovalDecision:
    """Approves the wiki's `read_page`; anything else approved with an edit (another page)."""
    edit = None if request.tool.startswith("mcp__wiki__read_page") else {"page": "draft"}
    return ApprovalDecision(call_id=request.call_id, approved=True, by="test", args=edit)


async def test_a_remote_mcp_call_waits_for_the_operator(tmp_path: Path) -> None:
    """Two remote MCP calls in one answer, each a write put to the operator: the approved one
    reaches the agent to approve, and what OpenAI's run of it says is its result; the edited
    one cannot be carried out (OpenAI runs the model's arguments or nothing), so it is a
    rejection telling the model what to run instead: text for the agent and, where the
    upstream keeps the conversation, its request answered `approve: false` with the reason."""
    door_file = tmp_path / "door.json"
    first = responses(asked("read_page", page="home"), asked("edit_page", page="home"))
    ran = {"type": "mcp_call", "id": "mcp_1", "server_label": "wiki", "name": "read_page",
           "arguments": '{"page": "home"}', "approval_request_id": "mcpr_read_page",
           "output": "the home page", "status": "completed"}  # fmt: skip
    decider = Decider(reads_as_asked)
    with RawUpstream([first, responses(ran, said("Read it."))]) as upstream:
        run = GatewayRun(folder(tmp_path), door_command(door_file), MODEL,
                         upstream.root + "/v1", approver=decider)  # fmt: skip
        async with door_run(run, door_file) as door:
            client = door.openai()
            answer = await client.responses.create(model="m", input="read home", tools=[MCP])
            kinds = [i.type for i in answer.output]
            approval = {"type": "mcp_approval_response", "approval_request_id": "mcpr_read_page",
                        "approve": True}  # fmt: skip
            second = await client.responses.create(
                model="m", previous_response_id=answer.id, input=[approval], tools=[MCP]
            )
        await run.outcome()
        went_on = upstream.bodies[1]["input"]
    assert kinds == ["mcp_approval_request", "message"]
    assert answer.output[0].id == "mcpr_read_page"
    assert "Run it with this input instead" in answer.output_text
    assert second.output_text == "Read it."
    proposed = run.events(CallProposed)
    assert [(p.tool.split(":")[0], p.risk, p.args) for p in proposed] == [
        ("mcp__wiki__read_page", "write", {"page": "home"}),
        ("mcp__wiki__edit_page", "write", {"page": "home"}),
    ]
    assert [r.tool for r in decider.asked] == ["mcp__wiki__read_page", "mcp__wiki__edit_page"]
    finished = {f.call_id: f for f in run.events(ToolFinished)}
    assert finished["c1"].status is CallStatus.EXECUTED
    assert "the home page" in str(finished["c1"].result)
    assert finished["c2"].status is CallStatus.REJECTED
    [denied] = [i for i in went_on if i.get("type") == "mcp_approval_response" and
                i["approval_request_id"] == "mcpr_edit_page"]  # fmt: skip
    assert denied["approve"] is False and '"draft"' in denied["reason"]
    assert "Run it with this input instead" in denied["reason"]


async def test_a_remote_mcp_server_that_runs_calls_unasked_is_refused(tmp_path: Path) -> None:
    """`require_approval` `never` (or a filter sparing some tools) would have OpenAI run its
    calls with nobody asked: refused with a 400 naming the server, never asked upstream,
    whether the request declares it in `tools` or in an input's `additional_tools`; a server
    whose calls are all asked (`always`, or left unset) goes upstream."""
    from openai import BadRequestError

    door_file = tmp_path / "door.json"
    unasked = {**MCP, "server_label": "ops", "require_approval": "never"}
    spared = {**MCP, "server_label": "ops", "require_approval": {"never": {"tool_names": ["x"]}}}
    added = {"type": "additional_tools", "role": "developer", "tools": [spared]}
    with RawUpstream([responses(said("Fine."))]) as upstream:
        run = GatewayRun(folder(tmp_path), door_command(door_file), MODEL,
                         upstream.root + "/v1")  # fmt: skip
        async with door_run(run, door_file) as door:
            client = door.openai()
            for extra in ({"input": "go", "tools": [unasked]},
                          {"input": [added, {"role": "user", "content": "go"}]}):  # fmt: skip
                with pytest.raises(BadRequestError) as refused:
                    await client.responses.create(model="m", **extra)
                assert "remote MCP server `ops`" in refused.value.message
                assert "`require_approval` is not `always`" in refused.value.message
            assert upstream.bodies == []
            asked_always = {**MCP, "require_approval": "always"}
            fine = await client.responses.create(model="m", input="go", tools=[MCP, asked_always])
        await run.outcome()
    assert fine.output_text == "Fine."


async def test_a_tool_search_is_a_read_and_a_program_runs_upstream(tmp_path: Path) -> None:
    """A `tool_search_call` the client runs is released at once as a read (nobody asked), its
    result the tools it loaded; the server's own tool search is no call of the run; a `program`
    passes as OpenAI ran it, and the `Write` it calls of the client is held as any write."""
    door_file = tmp_path / "door.json"
    search = item("tool_search_call", execution="client", arguments={"query": "calendar"})
    served = item("tool_search_call", execution="server", arguments={"query": "mail"})
    program = item("program", code="await tools.Write({file_path: 'a.txt'})", fingerprint="fp")
    write = item("function_call", name="Write", arguments='{"file_path": "a.txt"}',
                 caller={"type": "program", "caller_id": program["call_id"]})  # fmt: skip
    decider = Decider(lambda r: ApprovalDecision(call_id=r.call_id, approved=False, by="test",
                                                 reason="not now"))  # fmt: skip
    with RawUpstream([responses(search, served, program, write), responses(said("Ok."))]) as up:
        run = GatewayRun(folder(tmp_path), door_command(door_file), MODEL, up.root + "/v1",
                         approver=decider)  # fmt: skip
        async with door_run(run, door_file) as door:
            client = door.openai()
            answer = await client.responses.create(model="m", input="plan a meeting")
            loaded = {"type": "tool_search_output", "call_id": search["call_id"],
                      "execution": "client", "status": "completed",
                      "tools": [{"type": "function", "name": "add_event",
                                 "parameters": {"type": "object"}}]}  # fmt: skip
            await client.responses.create(model="m", previous_response_id=answer.id,
                                          input=[loaded])  # fmt: skip
        await run.outcome()
    kinds = [i.type for i in answer.output]
    assert kinds == ["tool_search_call", "tool_search_call", "program", "message"]
    assert answer.output[2].model_dump()["code"] == program["code"]  # as OpenAI ran it
    proposed = run.events(CallProposed)
    assert [(p.tool.split(":")[0], p.risk) for p in proposed] == [
        ("tool_search", "read"), ("Write", "write")
    ]  # fmt: skip
    assert "the Responses API" in proposed[0].risk_source
    assert [r.tool.split(":")[0] for r in decider.asked] == ["Write"]  # the search: nobody
    finished = {f.call_id: f for f in run.events(ToolFinished)}
    assert finished["c1"].status is CallStatus.EXECUTED
    assert "loaded add_event" in str(finished["c1"].result)
    assert finished["c2"].status is CallStatus.REJECTED


async def test_an_output_item_of_a_type_loopdeck_does_not_know_is_held_as_a_write(
    tmp_path: Path,
) -> None:
    """An item the API may add that is no `*_call` could still be something the client acts
    on: held for the operator as a write (the tool named by its type, its input the item's
    fields), never passed unasked; rejected, it is text. The kinds known to do nothing on the
    client (a message, reasoning, a compaction) pass as they are, nobody asked."""
    door_file = tmp_path / "door.json"
    thought = {"type": "reasoning", "id": "rs_1", "summary": []}
    packed = {"type": "compaction", "id": "cmp_1", "encrypted_content": "opaque"}
    acts = {"type": "browser_action", "id": "ba_1", "action": {"click": "#buy"}}
    decider = Decider(lambda r: ApprovalDecision(call_id=r.call_id, approved=False, by="test",
                                                 reason="not that"))  # fmt: skip
    with RawUpstream([responses(thought, packed, acts, said("Clicking."))]) as up:
        run = GatewayRun(folder(tmp_path), door_command(door_file), MODEL, up.root + "/v1",
                         approver=decider)  # fmt: skip
        async with door_run(run, door_file) as door:
            answer = await door.openai().responses.create(model="m", input="buy it")
        await run.outcome()
    kinds = [i.type for i in answer.output]
    assert kinds == ["reasoning", "compaction", "message", "message"]
    assert "not that" in answer.output_text
    [proposed] = run.events(CallProposed)
    assert (proposed.tool.split(":")[0], proposed.risk) == ("browser_action", "write")
    assert proposed.args == {"action": {"click": "#buy"}}
    assert [r.tool.split(":")[0] for r in decider.asked] == ["browser_action"]


async def test_a_rejected_item_of_an_unknown_type_is_answered_upstream_as_the_api_takes(
    tmp_path: Path,
) -> None:
    """An agent going on with `previous_response_id`: the upstream still holds the item of a
    type loopdeck does not know that the operator rejected. No output item of the API's
    answers such a type (a guessed `browser_action_output` is an input the API refuses), so
    the agent's next request carries a developer message saying it was not carried out and
    why, and the upstream takes it."""
    door_file = tmp_path / "door.json"
    acts = {"type": "browser_action", "id": "ba_1", "action": {"click": "#buy"}}
    read = item("function_call", name="Read", arguments='{"file_path": "b.txt"}')
    decider = Decider(lambda r: ApprovalDecision(call_id=r.call_id, approved=False, by="test",
                                                 reason="not that"))  # fmt: skip
    with RawUpstream([responses(acts, read), responses(said("Understood."))]) as up:
        run = GatewayRun(folder(tmp_path), door_command(door_file), MODEL, up.root + "/v1",
                         approver=decider)  # fmt: skip
        async with door_run(run, door_file) as door:
            client = door.openai()
            first = await client.responses.create(model="m", input="buy it")
            output = {"type": "function_call_output", "call_id": read["call_id"], "output": "b"}
            second = await client.responses.create(
                model="m", previous_response_id=first.id, input=[output]
            )
        await run.outcome()
        went_on = up.bodies[1]["input"]
    assert up.problems == []
    assert second.output_text == "Understood."
    assert [i.get("type") for i in went_on] == ["message", "function_call_output"]
    told = went_on[0]
    assert told["role"] == "developer" and "`browser_action` item ba_1" in told["content"]
    assert "not that" in told["content"]


async def test_a_tool_a_stored_prompt_brings_is_held_whatever_its_name(tmp_path: Path) -> None:
    """A request with a stored prompt (`prompt`) can bring tools loopdeck never sees: a call
    to one the request does not declare is held for the operator even under a name loopdeck's
    defaults call a read (a stored `Read` may do anything), saying why; a read the request
    declares is released as ever, and the prompt goes upstream as the agent sent it."""
    door_file = tmp_path / "door.json"
    stored = item("function_call", name="Read", arguments='{"file_path": "a.txt"}')
    declared_read = item("function_call", name="Grep", arguments='{"pattern": "x"}')
    grep = {"type": "function", "name": "Grep", "parameters": {"type": "object"}}
    with RawUpstream([responses(stored, declared_read, said("Looking."))]) as up:
        decider = Decider(approve)
        run = GatewayRun(folder(tmp_path), door_command(door_file), MODEL, up.root + "/v1",
                         approver=decider)  # fmt: skip
        async with door_run(run, door_file) as door:
            answer = await door.openai().responses.create(
                model="m",
                input="look",
                tools=[grep],  # type: ignore[list-item]
                prompt={"id": "pmpt_stored", "version": "2"},
            )
        await run.outcome()
        sent = up.bodies[0]
    assert sent["prompt"] == {"id": "pmpt_stored", "version": "2"}
    assert [i.type for i in answer.output] == ["function_call", "function_call", "message"]
    proposed = {p.tool.split(":")[0]: p for p in run.events(CallProposed)}
    assert (proposed["Read"].risk, proposed["Grep"].risk) == ("write", "read")
    assert "stored prompt" in proposed["Read"].risk_source
    assert [r.tool.split(":")[0] for r in decider.asked] == ["Read"]


async def test_a_tool_an_earlier_answer_loaded_is_held_whatever_its_name(
    tmp_path: Path,
) -> None:
    """A server tool search's `tool_search_output` loads a function tool into a conversation
    the upstream keeps: the agent going on from it (`previous_response_id`) does not declare
    it, so a call to it is held for the operator even under a name loopdeck's defaults call a
    read (a loaded `Read` may do anything), saying why; a read the request declares is
    released as ever."""
    door_file = tmp_path / "door.json"
    search = item("tool_search_call", execution="server", arguments={"query": "files"})
    loaded = {"type": "tool_search_output", "id": "ts_1", "execution": "server",
              "tools": [{"type": "function", "name": "Read",
                         "parameters": {"type": "object"}}]}  # fmt: skip
    stored = item("function_call", name="Read", arguments='{"file_path": "a.txt"}')
    declared_read = item("function_call", name="Grep", arguments='{"pattern": "x"}')
    grep = {"type": "function", "name": "Grep", "parameters": {"type": "object"}}
    replies = [responses(search, loaded, said("Loaded.")),
               responses(stored, declared_read, said("Looking."))]  # fmt: skip
    with RawUpstream(replies) as up:
        decider = Decider(approve)
        run = GatewayRun(folder(tmp_path), door_command(door_file), MODEL, up.root + "/v1",
                         approver=decider)  # fmt: skip
        async with door_run(run, door_file) as door:
            client = door.openai()
            first = await client.responses.create(model="m", input="find a file tool")
            answer = await client.responses.create(
                model="m", previous_response_id=first.id, input="look",
                tools=[grep],  # type: ignore[list-item]
            )  # fmt: skip
        await run.outcome()
    assert [i.type for i in answer.output] == ["function_call", "function_call", "message"]
    proposed = {p.tool.split(":")[0]: p for p in run.events(CallProposed)}
    assert (proposed["Read"].risk, proposed["Grep"].risk) == ("write", "read")
    assert "an earlier answer loaded" in proposed["Read"].risk_source
    assert [r.tool.split(":")[0] for r in decider.asked] == ["Read"]


async def test_an_answer_adding_a_tool_a_request_is_refused_for_is_refused(
    tmp_path: Path,
) -> None:
    """The upstream can add tools mid-answer (an output `additional_tools`, a server tool
    search's `tool_search_output`): one the request side refuses by name (a remote MCP server
    run unasked, the computer tool) refuses the answer the same way, the agent told why with
    none of the answer (its calls neither asked nor released), and the run says it."""
    from openai import BadRequestError

    door_file = tmp_path / "door.json"
    unasked = {**MCP, "server_label": "ops", "require_approval": "never"}
    added = {"type": "additional_tools", "id": "at_1", "role": "developer", "tools": [unasked]}
    screen = {"type": "computer_use_preview", "display_width": 8, "display_height": 8,
              "environment": "browser"}  # fmt: skip
    loaded = {"type": "tool_search_output", "id": "ts_1", "execution": "server",
              "tools": [screen]}  # fmt: skip
    write = item("function_call", name="Write", arguments='{"file_path": "a.txt"}')
    decider = Decider(approve)
    with RawUpstream([responses(added, write), responses(loaded, write)]) as up:
        run = GatewayRun(folder(tmp_path), door_command(door_file), MODEL, up.root + "/v1",
                         approver=decider)  # fmt: skip
        async with door_run(run, door_file) as door:
            client = door.openai()
            refusals = []
            for _ in range(2):
                with pytest.raises(BadRequestError) as refused:
                    await client.responses.create(model="m", input="go")
                refusals.append(refused.value.message)
        await run.outcome()
    assert "added a tool" in refusals[0] and "remote MCP server `ops`" in refusals[0]
    assert "added a tool" in refusals[1] and "`computer_use_preview`" in refusals[1]
    assert run.events(CallProposed) == [] and decider.asked == []
    findings = [f.text for f in run.events(Finding)]
    assert any("remote MCP server `ops`" in f for f in findings)


async def test_a_remote_mcp_call_run_in_the_answer_adding_its_server_is_said_run(
    tmp_path: Path,
) -> None:
    """The answer adds a remote MCP server that runs its calls unasked and holds a call OpenAI
    already ran on it: the answer is refused, yet the call happened. The operator is told
    plainly that it RAN upstream before loopdeck saw it (its server, tool and arguments), and
    the run records it executed with what its run said, nobody asked, never as refused."""
    from openai import BadRequestError

    door_file = tmp_path / "door.json"
    unasked = {**MCP, "server_label": "ops", "require_approval": "never"}
    added = {"type": "additional_tools", "id": "at_1", "role": "developer", "tools": [unasked]}
    ran = {"type": "mcp_call", "id": "mcp_9", "server_label": "ops", "name": "drop_table",
           "arguments": '{"table": "users"}', "output": "dropped users",
           "status": "completed"}  # fmt: skip
    decider = Decider(approve)
    with RawUpstream([responses(added, ran, said("Dropped it."))]) as up:
        run = GatewayRun(folder(tmp_path), door_command(door_file), MODEL, up.root + "/v1",
                         approver=decider)  # fmt: skip
        async with door_run(run, door_file) as door:
            with pytest.raises(BadRequestError) as refused:
                await door.openai().responses.create(model="m", input="tidy the db")
        await run.outcome()
    assert "added a tool" in refused.value.message
    assert decider.asked == []
    [proposed] = run.events(CallProposed)
    assert proposed.tool.split(":")[0] == "mcp__ops__drop_table"
    assert proposed.args == {"table": "users"} and proposed.risk == "write"
    assert "run by the upstream before loopdeck saw" in proposed.risk_source
    [finished] = run.events(ToolFinished)
    assert finished.status is CallStatus.EXECUTED and "dropped users" in str(finished.result)
    [told] = [f.text for f in run.events(Finding) if "RAN upstream" in f.text]
    assert "`ops`" in told and "`drop_table`" in told and '{"table": "users"}' in told
    assert "before loopdeck saw the answer" in told and "dropped users" in told


async def test_call_items_with_no_id_are_each_held_and_decided_apart(tmp_path: Path) -> None:
    """Two items of a kind loopdeck does not know, neither with an `id` nor a `call_id`: each
    is its own call (known by its place in the answer), asked and decided apart, the
    rejected one replaced by text and the approved one passed as it came."""
    door_file = tmp_path / "door.json"
    buy = {"type": "browser_action", "action": {"click": "#buy"}}
    look = {"type": "browser_action", "action": {"scroll": "down"}}

    def buys_nothing(request: ApprovalRequest) -> ApprovalDecision:
        refused = "#buy" in json.dumps(request.args)
        return ApprovalDecision(call_id=request.call_id, approved=not refused, by="test",
                                reason="not that" if refused else "")  # fmt: skip

    decider = Decider(buys_nothing)
    with RawUpstream([responses(buy, look)]) as up:
        run = GatewayRun(folder(tmp_path), door_command(door_file), MODEL, up.root + "/v1",
                         approver=decider)  # fmt: skip
        async with door_run(run, door_file) as door:
            answer = await door.openai().responses.create(model="m", input="look, buy")
        await run.outcome()
    assert [i.type for i in answer.output] == ["message", "browser_action"]
    assert "not that" in answer.output_text
    assert answer.output[1].model_dump()["action"] == {"scroll": "down"}
    proposed = run.events(CallProposed)
    assert [p.args for p in proposed] == [{"action": {"click": "#buy"}},
                                          {"action": {"scroll": "down"}}]  # fmt: skip
    assert len(decider.asked) == 2
