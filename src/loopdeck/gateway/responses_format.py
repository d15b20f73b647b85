"""OpenAI Responses (`/v1/responses`: Codex, the `openai` SDK's `responses`): asked upstream
with `litellm.aresponses`, streamed as LiteLLM fakes a stream of a whole response
(`build_synthetic_response_events`), each event named by its type.

An answer's tool uses are every output item the client carries out: `function_call`,
`custom_tool_call`, the built-in tools' `local_shell_call`, `shell_call`, `apply_patch_call`
and `computer_call` (each the tool its kind names, its input the item's action or operation),
a `tool_search_call` the client runs (the tool `tool_search`: a read, searching the agent's own
deferred tools), an `mcp_approval_request` (a remote MCP server's call, run by OpenAI once
the client approves it: the tool `mcp__SERVER__NAME`, its input the call's arguments, held as
any write; approved, it goes to the agent to approve; rejected, it is replaced by text and
the upstream told `approve: false` with the reason), and any other `*_call` item the API may
add (the tool named by its kind, unknown to loopdeck so a write, its input the item's
fields): only the items the API's own servers run (`SERVER_RUN`: a `program` too, the
JavaScript of programmatic tool calling, run in OpenAI's runtime; the client's tools it calls
come as their own call items, held as any) are not calls of the run.

An item of any other type passes only when loopdeck knows it does nothing on the client
(`PASSES`: a message, reasoning, a compaction, a tool's output, ...). One it does not know,
whatever its name, is held as a write the same way (the tool named by its type: `--tool
TYPE=read` releases it unasked): the client might act on it, and an operator's console lets
no action through unseen; a harmless new type costs a question, never an unseen action.

A request with a stored prompt (`prompt`: its instructions and tools kept by OpenAI), or going
on from an answer the upstream keeps (`previous_response_id`: a tool search's
`tool_search_output` there may have loaded tools), can bring tools loopdeck never sees: a call
to a tool the request does not declare itself (`unseen`) is held as a write whatever its name
(a stored or loaded `Read` may be anything), unless the operator named it (`--tool NAME=read`).

Refused by name, before the request goes upstream, wherever its tools are declared (`tools`,
or an input's `additional_tools` or client `tool_search_output`): the computer tool
(`computer_use_preview`, any `computer*` type: a `computer_call` taken out is answered
upstream only by a screenshot, which the gateway cannot make), and a remote MCP server whose
`require_approval` is not `always` (its calls would run on OpenAI's servers with nobody asked).
An answer that adds such a tool itself (an output `additional_tools` or `tool_search_output`)
is refused the same way (`refused_answer`): none of it reaches the agent, which is told why;
a call OpenAI already ran on such a server (`ran_unasked`) is recorded as run, not refused.

A call item with neither `call_id` nor `id` is known by its place in the answer
(`RESPONSE_ID#INDEX`), so two of them are held and decided apart.

A conversation the upstream keeps (`previous_response_id`) holds the answer as the upstream
gave it: a call replaced for the agent still needs its output there, or the upstream refuses
the next request ("No tool output found for function call"). `owed` makes those outputs (the
reason the model reads; for a kind no output item of the API's answers, a developer message),
`paid` adds them to the agent's next request.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from loopdeck.gateway.answer import (
    SSE_COMMENT,
    Body,
    Replace,
    ToolResult,
    ToolUse,
    Usage,
    Verdict,
    input_text,
    parsed_input,
    present,
    result_text,
    split_usage,
    sse,
)
from loopdeck.gateway.chat_format import final_response
from loopdeck.gateway.responses_tools import TOOLS_IN, declared, refusal, tools_of
from loopdeck.llm.loader import litellm_module

NOT_PASSED = frozenset({"model", "stream", "stream_options"})
# Items with a call id that the API's servers run (their outcome comes with the answer).
SERVER_RUN = frozenset({
    "web_search_call", "file_search_call", "code_interpreter_call", "image_generation_call",
    "mcp_call", "mcp_list_tools", "program", "program_output",
})  # fmt: skip
# Items known to do nothing on the client: anything else is a call, held (`is_call`).
PASSES = frozenset({
    "message", "reasoning", "compaction", "additional_tools", "tool_search_output",
    "mcp_approval_response", "function_call_output", "custom_tool_call_output",
    "computer_call_output", "local_shell_call_output", "shell_call_output",
    "apply_patch_call_output",
})  # fmt: skip
MCP_ASKED = "mcp_approval_request"  # a remote MCP call OpenAI runs once the client approves it
INPUT_OF = {  # a call's kind -> the field holding its input
    "function_call": "arguments", "custom_tool_call": "input", "local_shell_call": "action",
    "shell_call": "action", "apply_patch_call": "operation", "computer_call": "action",
    "tool_search_call": "arguments", MCP_ASKED: "arguments",
}  # fmt: skip
TOOL_OF = {  # a built-in call's tool (the names Codex's defaults know: writes)
    "local_shell_call": "local_shell", "shell_call": "shell", "apply_patch_call": "apply_patch",
    "computer_call": "computer", "tool_search_call": "tool_search",
}  # fmt: skip
TEXT_ANSWERED = {  # a call's kind -> the output item that answers it with text
    "function_call": "function_call_output", "custom_tool_call": "custom_tool_call_output",
    # The API's `local_shell_call_output` is keyed by an `id`; Codex, the tool's own client,
    # answers the call with a `function_call_output` by its `call_id`.
    "local_shell_call": "function_call_output",
}  # fmt: skip
ITEM_FIELDS = frozenset({"type", "id", "call_id", "status"})  # not an unknown call's input
MCP_FIXED = "OpenAI runs a remote MCP call with the model's arguments or not at all"
LOCAL_SHELL = TOOL_OF["local_shell_call"]
CHUNK = 1 << 20  # text sent in one delta: the answer is whole, nothing is gained by slicing


class ResponsesFormat:
    name = "responses"

    async def call(self, litellm: Any, body: Body, upstream: dict[str, Any]) -> Body:
        kwargs = {k: v for k, v in body.items() if k not in NOT_PASSED}
        response = await litellm.aresponses(**kwargs, **upstream, stream=False)
        answer: Body = response.model_dump(mode="json", exclude_none=True)
        return answer

    def refused(self, body: Body) -> str | None:
        said = refusal(declared(body))
        return None if said is None else f"loopdeck: {said}"

    def refused_answer(self, answer: Body) -> str | None:
        """Why the answer is not delivered: it adds a tool the request would be refused for."""
        items = [i for i in answer.get("output") or [] if i.get("type") in TOOLS_IN]
        said = refusal([tool for item in items for tool in tools_of(item)])
        return None if said is None else f"loopdeck: the upstream's answer added a tool: {said}"

    def tool_uses(self, answer: Body) -> list[ToolUse]:
        return [_use(use_id, item) for use_id, item in _calls(answer)]

    def schemas(self, body: Body) -> dict[str, Any]:
        return {
            str(tool["name"]): tool.get("parameters")
            for tool in body.get("tools") or []
            if isinstance(tool, dict) and tool.get("type") == "function" and tool.get("name")
        }

    def unseen(self, body: Body, uses: list[ToolUse]) -> frozenset[str]:
        """With a stored prompt (`prompt`: kept by OpenAI with its own tools) or a conversation
        the upstream keeps (`previous_response_id`: tools an earlier answer loaded), the tools
        of `uses` the request does not declare itself: by name, a built-in by its type, a
        remote MCP call by its server."""
        if not (body.get("prompt") or body.get("previous_response_id")):
            return frozenset()
        tools = declared(body)
        named = {str(t.get("name") or t.get("type")) for t in tools}
        servers = {f"mcp__{t.get('server_label')}__" for t in tools if t.get("type") == "mcp"}
        return frozenset(
            use.name for use in uses
            if use.name not in named and not any(use.name.startswith(s) for s in servers)
        )  # fmt: skip

    def decided(self, answer: Body, verdicts: dict[str, Verdict]) -> Body:
        answer = json.loads(json.dumps(answer))
        ids = {id(item): use_id for use_id, item in _calls(answer)}
        output = []
        for item in answer.get("output") or []:
            verdict = verdicts.get(ids[id(item)]) if id(item) in ids else None
            if isinstance(verdict, Replace):
                output.append(_text_item(verdict.text))
                continue
            if verdict is not None and verdict.edited is not None:
                _edit(item, verdict.edited)
            output.append(item)
        answer["output"] = output
        return answer

    def retold(self, body: Body, answer: Body, results: dict[str, str]) -> Body:
        """The answer's items and an output for each call. A conversation the upstream keeps
        (`previous_response_id`) goes on from the answer; any other is sent whole again."""
        items = [present(item) for item in answer.get("output") or []]
        kinds = {use_id: str(item.get("type")) for use_id, item in _calls(answer)}
        outputs = [output_item(kinds.get(use_id, "function_call"), use_id, text)
                   for use_id, text in results.items()]  # fmt: skip
        if body.get("previous_response_id") and answer.get("id"):
            return {**body, "previous_response_id": answer["id"], "input": outputs}
        asked = body.get("input")
        earlier = asked if isinstance(asked, list) else [{"role": "user", "content": asked or ""}]
        return {**body, "input": [*earlier, *items, *outputs]}

    def prefixed(self, answer: Body, text: str) -> Body:
        """`text` as a message first, after the reasoning an answer starts with."""
        answer = json.loads(json.dumps(answer))
        output = answer.get("output") or []
        at = next((i for i, item in enumerate(output) if item.get("type") != "reasoning"),
                  len(output))  # fmt: skip
        answer["output"] = [*output[:at], _text_item(text), *output[at:]]
        return answer

    def usage(self, answer: Body) -> Usage | None:
        said = answer.get("usage") or {}  # `input_tokens` counts the cached ones too
        parts = ("input_tokens", "output_tokens", "total_tokens")
        return split_usage(*(said.get(k) for k in parts))

    def said(self, answer: Body) -> str:
        texts = []
        for item in answer.get("output") or []:
            if item.get("type") == "message":
                texts += [p.get("text") or "" for p in item.get("content") or []]
        return "\n".join(t for t in texts if t)

    def results(self, body: Body) -> list[ToolResult]:
        items = body.get("input")
        found = []
        for item in items if isinstance(items, list) else []:
            if not isinstance(item, dict):
                continue
            if item.get("type") == "mcp_approval_response" and item.get("approve") is False:
                why = f": {item['reason']}" if item.get("reason") else ""
                said = f"the agent did not approve it{why}"
                found.append(ToolResult(str(item.get("approval_request_id")), said, True))
            elif str(item.get("type")).endswith("_output"):
                failed = item.get("status") == "failed"  # an `apply_patch_call_output`'s
                found.append(ToolResult(str(item.get("call_id")), _output_text(item), failed))
        return found

    def ran(self, answer: Body) -> list[ToolResult]:
        """Each remote MCP call OpenAI ran once the agent approved it: its output or error,
        by the approval request's id."""
        found = []
        for item in answer.get("output") or []:
            if item.get("type") == "mcp_call" and item.get("approval_request_id"):
                error = item.get("error")
                said = result_text(error or item.get("output"))
                found.append(ToolResult(str(item["approval_request_id"]), said, bool(error)))
        return found

    def ran_unasked(self, answer: Body) -> list[tuple[ToolUse, ToolResult]]:
        """Each remote MCP call OpenAI ran with nobody asked (no approval request: its server
        runs calls unasked), as the tool `mcp__SERVER__NAME` with its arguments, and what the
        run said."""
        found = []
        for at, item in enumerate(answer.get("output") or []):
            if item.get("type") != "mcp_call" or item.get("approval_request_id"):
                continue
            use_id = str(item.get("id") or f"{answer.get('id')}#{at}")
            name = f"mcp__{item.get('server_label')}__{item.get('name')}"
            use = ToolUse(use_id, name, parsed_input(item.get("arguments")), MCP_FIXED)
            error = item.get("error")
            found.append((use, ToolResult(use_id, result_text(error or item.get("output")),
                                          bool(error))))  # fmt: skip
        return found

    def owed(self, answer: Body, replaced: dict[str, str]) -> list[Body]:
        """The outputs an upstream keeping `answer` needs for the calls replaced in the
        agent's copy (`replaced`: the text the model reads, by call id)."""
        kinds = {use_id: str(item.get("type")) for use_id, item in _calls(answer)}
        return [output_item(kinds[k], k, text) for k, text in replaced.items() if k in kinds]

    @staticmethod
    def paid(body: Body, owed: list[Body]) -> Body:
        """The agent's request with the outputs it owes first."""
        asked = body.get("input")
        rest = asked if isinstance(asked, list) else [{"role": "user", "content": asked or ""}]
        return {**body, "input": [*owed, *(rest if asked is not None else [])]}

    def final(self, text: str, model: str) -> Body:
        litellm_module()
        from litellm.responses.litellm_completion_transformation.transformation import (
            LiteLLMCompletionResponsesConfig,
        )

        made = LiteLLMCompletionResponsesConfig.transform_chat_completion_response_to_responses_api_response(  # noqa: E501
            request_input="", responses_api_request={},
            chat_completion_response=final_response(text, model),
        )  # fmt: skip
        answer: Body = made.model_dump(mode="json", exclude_none=True)
        return answer

    def frames(self, answer: Body) -> list[bytes]:
        litellm_module()
        from litellm.responses.streaming_iterator import build_synthetic_response_events
        from litellm.types.llms.openai import ResponsesAPIResponse

        whole = ResponsesAPIResponse.model_validate(answer)
        events = build_synthetic_response_events(
            transformed=whole, logging_obj=None, chunk_size=CHUNK
        )
        frames = []
        for event in events:
            data = event.model_dump(mode="json", exclude_none=True)
            frames.append(sse(data, str(data.get("type"))))
        return frames

    def keepalive(self) -> bytes:
        return SSE_COMMENT

    def error(self, status: int, kind: str, message: str, code: str | None = None) -> Body:
        return {"error": {"message": message, "type": kind, "param": None, "code": code or kind}}

    def stream_error(self, kind: str, message: str, code: str | None = None) -> bytes:
        event = {"type": "error", "code": code or kind, "message": message, "param": None}
        return sse(event, "error")


def _text_item(text: str) -> Body:
    return {
        "type": "message", "id": f"msg_{uuid.uuid4().hex}", "status": "completed",
        "role": "assistant", "content": [{"type": "output_text", "text": text, "annotations": []}],
    }  # fmt: skip


def is_call(item: Body) -> bool:
    """Whether the client may carry the item out (a call of the run's): any item but those
    the API's servers run and those known to do nothing (`PASSES`)."""
    kind = str(item.get("type"))
    if kind == "tool_search_call":
        return item.get("execution") == "client"
    return kind not in SERVER_RUN and kind not in PASSES


def _calls(answer: Body) -> list[tuple[str, Body]]:
    """The answer's calls, each with its id: its `call_id` or `id`, else its place."""
    output = answer.get("output") or []
    return [(str(item.get("call_id") or item.get("id") or f"{answer.get('id')}#{at}"), item)
            for at, item in enumerate(output) if is_call(item)]  # fmt: skip


def _use(use_id: str, item: Body) -> ToolUse:
    kind = str(item.get("type"))
    field = INPUT_OF.get(kind)
    if field is None:  # a kind loopdeck does not know: all it says, as a write of its own
        given: dict[str, Any] | str = {k: v for k, v in item.items() if k not in ITEM_FIELDS}
        return ToolUse(use_id, kind, given)
    name = TOOL_OF.get(kind) or str(item.get("name"))
    raw = item.get(field)
    given = str(raw or "") if kind == "custom_tool_call" else parsed_input(raw)
    if kind == MCP_ASKED:
        return ToolUse(use_id, f"mcp__{item.get('server_label')}__{name}", given, MCP_FIXED)
    return ToolUse(use_id, name, given)


def _edit(item: Body, edited: dict[str, Any] | str) -> None:
    kind = str(item.get("type"))
    field = INPUT_OF.get(kind)
    if kind == "function_call":
        item["arguments"] = input_text(edited)
    elif kind == "tool_search_call" and isinstance(edited, dict):
        item["arguments"] = edited  # an object, not JSON text
    elif kind == "custom_tool_call":
        item["input"] = edited if isinstance(edited, str) else input_text(edited)
    elif field is not None and isinstance(edited, dict):
        item[field] = edited
    elif field is None and isinstance(edited, dict):
        item.update({k: v for k, v in edited.items() if k not in ITEM_FIELDS})


def output_item(kind: str, call_id: str, text: str) -> Body:
    """What answers a call of `kind` that did not run, saying `text`, as the API takes it."""
    if kind == "shell_call":
        outcome = {"type": "exit", "exit_code": 1}
        said = [{"stdout": "", "stderr": text, "outcome": outcome}]
        return {"type": "shell_call_output", "call_id": call_id, "output": said}
    if kind == "apply_patch_call":
        return {"type": "apply_patch_call_output", "call_id": call_id, "status": "failed",
                "output": text}  # fmt: skip
    if kind == MCP_ASKED:
        return {"type": "mcp_approval_response", "approval_request_id": call_id,
                "approve": False, "reason": text}  # fmt: skip
    if kind == "tool_search_call":  # no words: the search loads no tool
        return {"type": "tool_search_output", "call_id": call_id, "execution": "client",
                "tools": []}  # fmt: skip
    if kind in TEXT_ANSWERED:
        return {"type": TEXT_ANSWERED[kind], "call_id": call_id, "output": text}
    # No item of the API's answers this kind with text (a kind it added since, a computer
    # call's answer is a screenshot): a guessed `{kind}_output` is an input type the API
    # refuses. The model reads it from the harness instead, as a developer message.
    told = f"loopdeck: your `{kind}` item {call_id} was not carried out. {text}"
    return {"type": "message", "role": "developer", "content": told}


def _output_text(item: Body) -> str:
    output = item.get("output")
    if item.get("type") == "tool_search_output":  # the tools it loaded, by name
        loaded = [str(t.get("name") or t.get("server_label") or t.get("type"))
                  for t in tools_of(item)]  # fmt: skip
        return f"loaded {', '.join(loaded)}" if loaded else "loaded no tool"
    if item.get("type") == "shell_call_output" and isinstance(output, list):
        parts = [p for p in output if isinstance(p, dict)]
        return "\n".join(str(p.get("stdout") or "") + str(p.get("stderr") or "") for p in parts)
    return result_text(output)
