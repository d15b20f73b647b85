"""A loopback OpenAI API for agents run offline under loopdeck: chat completions
(`/v1/chat/completions`, what opencode's OpenAI-compatible provider sends) and the Responses API
(`/v1/responses`, what Codex sends), each streamed as the API streams it (server-sent events),
playing a script of replies. Each request body is checked as the API would check it, and a
request it would refuse gets the API's 400:

- chat: roles system, developer, user, assistant and tool; every assistant `tool_calls` entry
  answered by a `tool` message with its id before the next assistant or user message, and no
  `tool` message that answers none;
- responses: every `function_call_output` (or `custom_tool_call_output`) answers a call of the
  same `call_id` earlier in `input`, and every call in `input` is answered.

Every request is recorded. The script is played by the conversation: the reply to a main-loop
request (one that sends tools) is the script's entry at the number of assistant turns already
in it, so a retried request gets the same reply. Requests without tools (a title, a summary)
get a short text without consuming the script.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from loopback_server import Body, Call, Loopback, LoopbackHandler, Seen, Text, listed, model_named

SIDE_TEXT = "Fix calc add"
USAGE_IN, USAGE_OUT = 120, 30


@dataclass(frozen=True)
class Calls:
    """Several tool calls in one reply (parallel tool calls)."""

    calls: tuple[Call, ...]
    text: str = ""


Reply = Text | Call | Calls
Step = Reply | Callable[[dict[str, Any]], Reply]


def calls_of(reply: Reply) -> tuple[Call, ...]:
    if isinstance(reply, Calls):
        return reply.calls
    return (reply,) if isinstance(reply, Call) else ()


def raw_args(call: Call) -> str:
    return call.args if isinstance(call.args, str) else json.dumps(call.args)


class OpenAILoopback(Loopback):
    url_path = "/v1"  # the base URL with its `/v1`, as OpenAI clients take it

    def handler(self) -> type[LoopbackHandler]:
        return Handler

    def is_model_request(self, seen: Seen) -> bool:
        return seen.method == "POST" and bool(seen.body)


# -- chat completions ----------------------------------------------------------------------------
def chat_turns(body: dict[str, Any]) -> int:
    return sum(1 for m in body.get("messages") or [] if m.get("role") == "assistant")


def check_chat(body: Body) -> list[str]:
    return listed(body, "messages", model_named(body), check_messages)


def check_messages(messages: list[dict[str, Any]]) -> list[str]:
    problems = []
    open_calls: set[str] = set()
    for i, message in enumerate(messages):
        role = message.get("role")
        if role not in ("system", "developer", "user", "assistant", "tool"):
            problems.append(f"messages.{i}: role {role!r}")
        if role == "tool":
            call_id = message.get("tool_call_id")
            if call_id not in open_calls:
                problems.append(f"messages.{i}: a tool message answers no tool call before it")
            open_calls.discard(call_id)
            continue
        if open_calls:
            problems.append(f"messages.{i}: tool calls {sorted(open_calls)} have no tool message")
            open_calls = set()
        if role == "assistant":
            calls = message.get("tool_calls") or []
            if not calls and not message.get("content"):
                problems.append(
                    f"messages.{i}: an assistant message with neither content nor calls"
                )
            for call in calls:
                function = call.get("function") or {}
                if not call.get("id") or not function.get("name"):
                    problems.append(f"messages.{i}: a tool call without an id or a name")
                try:
                    json.loads(function.get("arguments") or "")
                except ValueError:
                    problems.append(f"messages.{i}: tool call arguments that are not JSON")
                open_calls.add(call.get("id"))
    if open_calls:
        problems.append("the last assistant message has tool calls and no answer")
    return problems


def chat_chunks(model: str, reply: Reply, usage: bool) -> list[dict[str, Any]]:
    ident, created = f"chatcmpl-{uuid.uuid4().hex[:20]}", int(time.time())

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
        return {"id": ident, "object": "chat.completion.chunk", "created": created,
                "model": model, "choices": [choice]}  # fmt: skip

    text = reply.text
    out = [chunk({"role": "assistant", "content": ""})]
    out += [chunk({"content": text[k : k + 16]}) for k in range(0, len(text), 16)]
    finish = "stop"
    for index, call in enumerate(calls_of(reply)):
        raw = raw_args(call)
        start = {"index": index, "id": f"call_{uuid.uuid4().hex[:20]}", "type": "function",
                 "function": {"name": call.name, "arguments": ""}}  # fmt: skip
        out.append(chunk({"tool_calls": [start]}))
        out += [
            chunk({"tool_calls": [{"index": index, "function": {"arguments": raw[k : k + 24]}}]})
            for k in range(0, len(raw), 24)
        ]
        finish = "tool_calls"
    out.append(chunk({}, finish))
    if usage:
        tail = chunk({})
        tail["choices"] = []
        tail["usage"] = {"prompt_tokens": USAGE_IN, "completion_tokens": USAGE_OUT,
                         "total_tokens": USAGE_IN + USAGE_OUT}  # fmt: skip
        out.append(tail)
    return out


def chat_whole(model: str, reply: Reply) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply.text or None}
    finish = "stop"
    if calls_of(reply):
        message["tool_calls"] = [
            {"id": f"call_{uuid.uuid4().hex[:20]}", "type": "function",
             "function": {"name": call.name, "arguments": raw_args(call)}}
            for call in calls_of(reply)
        ]  # fmt: skip
        finish = "tool_calls"
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex[:20]}", "object": "chat.completion",
        "created": int(time.time()), "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": USAGE_IN, "completion_tokens": USAGE_OUT,
                  "total_tokens": USAGE_IN + USAGE_OUT},
    }  # fmt: skip


# -- responses -------------------------------------------------------------------------------------
CALLS = ("function_call", "custom_tool_call", "local_shell_call")
OUTPUTS = ("function_call_output", "custom_tool_call_output", "local_shell_call_output")


def responses_turns(body: dict[str, Any]) -> int:
    """Model turns so far: each run of assistant items (messages, calls, reasoning) is one."""
    turns, in_turn = 0, False
    for item in body.get("input") or []:
        kind = item.get("type", "message")
        mine = kind in (*CALLS, "reasoning") or (
            kind == "message" and item.get("role") == "assistant"
        )
        if mine and not in_turn:
            turns += 1
        in_turn = mine
    return turns


def check_responses(body: Body) -> list[str]:
    if isinstance(body.get("input"), str):
        return model_named(body)
    return listed(body, "input", model_named(body), check_input)


def check_input(items: list[dict[str, Any]]) -> list[str]:
    problems = []
    calls: dict[str, str] = {}
    answered: set[str] = set()
    for i, item in enumerate(items):
        kind = item.get("type", "message")
        if kind == "message" and item.get("role") not in (
            "user",
            "assistant",
            "system",
            "developer",
        ):
            problems.append(f"input.{i}: role {item.get('role')!r}")
        if kind in CALLS:
            call_id = item.get("call_id")
            if not call_id:
                problems.append(f"input.{i}: a {kind} without a call_id")
            calls[str(call_id)] = kind
        elif kind in OUTPUTS:
            call_id = str(item.get("call_id"))
            if call_id not in calls:
                problems.append(f"input.{i}: No tool call found for {kind} with call_id {call_id}")
            answered.add(call_id)
    for call_id, kind in calls.items():
        if call_id not in answered:
            problems.append(f"No tool output found for {kind} call {call_id}")
    return problems


def response_items(reply: Reply) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    if reply.text:
        items.append({
            "type": "message", "id": f"msg_{uuid.uuid4().hex[:20]}", "status": "completed",
            "role": "assistant",
            "content": [{"type": "output_text", "text": reply.text, "annotations": []}],
        })  # fmt: skip
    for call in calls_of(reply):
        call_id = f"call_{uuid.uuid4().hex[:20]}"
        if isinstance(call.args, str):
            items.append({"type": "custom_tool_call", "id": f"ctc_{uuid.uuid4().hex[:20]}",
                          "status": "completed", "call_id": call_id, "name": call.name,
                          "input": call.args})  # fmt: skip
        else:
            items.append({"type": "function_call", "id": f"fc_{uuid.uuid4().hex[:20]}",
                          "status": "completed", "call_id": call_id, "name": call.name,
                          "arguments": json.dumps(call.args)})  # fmt: skip
    return items


def response_events(model: str, reply: Reply) -> list[dict[str, Any]]:
    ident = f"resp_{uuid.uuid4().hex[:20]}"
    base = {"id": ident, "object": "response", "created_at": int(time.time()), "model": model,
            "status": "in_progress", "output": []}  # fmt: skip
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": base},
        {"type": "response.in_progress", "response": base},
    ]
    items = response_items(reply)
    for index, item in enumerate(items):
        events.append({"type": "response.output_item.added", "output_index": index,
                       "item": {**item, "status": "in_progress"}})  # fmt: skip
        if item["type"] == "message":
            text = item["content"][0]["text"]
            for k in range(0, len(text), 16):
                events.append({"type": "response.output_text.delta", "item_id": item["id"],
                               "output_index": index, "content_index": 0,
                               "delta": text[k : k + 16]})  # fmt: skip
        events.append({"type": "response.output_item.done", "output_index": index, "item": item})
    usage = {"input_tokens": USAGE_IN, "input_tokens_details": {"cached_tokens": 0},
             "output_tokens": USAGE_OUT, "output_tokens_details": {"reasoning_tokens": 0},
             "total_tokens": USAGE_IN + USAGE_OUT}  # fmt: skip
    done = {**base, "status": "completed", "output": items, "usage": usage}
    events.append({"type": "response.completed", "response": done})
    return events


def is_main(body: Body) -> bool:
    """The agent's own loop sends its tools; its side-requests do not."""
    return bool(body.get("tools"))


def side_reply(_: Body) -> Reply:
    return Text(SIDE_TEXT)


class Handler(LoopbackHandler):
    def error(self, code: int, message: str) -> dict[str, Any]:
        return {"error": {"message": message, "type": "invalid_request_error", "param": None,
                          "code": None}}  # fmt: skip

    def auth_problems(self) -> list[str]:
        return [] if self.headers.get("authorization") else ["no authorization header"]

    def do_GET(self) -> None:
        self.record()
        if self.path.split("?")[0].endswith("/models"):
            model = {"id": "loop-model", "object": "model", "owned_by": "loopback"}
            return self.send_json(200, {"object": "list", "data": [model]})
        self.not_found()

    def do_POST(self) -> None:
        body, seen = self.read_body()
        path = self.path.split("?")[0]
        chat = path.endswith("/chat/completions")
        if not chat and not path.endswith("/responses"):
            return self.not_found()
        check, turns = (check_chat, chat_turns) if chat else (check_responses, responses_turns)
        reply: Reply | None = self.model_reply(body, seen, check, is_main, turns, side_reply)
        if reply is None:
            return
        model = str(body["model"])
        if not body.get("stream"):
            if chat:
                return self.send_json(200, chat_whole(model, reply))
            return self.send_json(200, response_events(model, reply)[-1]["response"])
        if chat:
            usage = bool((body.get("stream_options") or {}).get("include_usage"))
            return self.stream([(None, c) for c in chat_chunks(model, reply, usage)], True)
        self.stream([(e["type"], e) for e in response_events(model, reply)], False)

    def stream(self, events: list[tuple[str | None, dict[str, Any]]], done: bool) -> None:
        frames = [
            (f"event: {name}\n" if name else "") + f"data: {json.dumps(data)}\n\n"
            for name, data in events
        ]
        if done:
            frames.append("data: [DONE]\n\n")
        self.send_stream({"content-type": "text/event-stream", "cache-control": "no-cache"}, frames)
