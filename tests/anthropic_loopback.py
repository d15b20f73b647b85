"""A loopback Anthropic Messages API for real agents run offline (Claude Code through its ACP
adapter): it plays a script of replies, streamed as the API streams them (server-sent events,
chunked), and checks each request body as the API would (roles alternate, each tool_result
answers a tool_use of the assistant turn just before it, the system prompt in `system`),
answering a request it would refuse with the API's 400. Every request is recorded.

The script is played by the conversation: the reply to a main-loop request is the script's
entry at the number of assistant turns already in it, so a retried request gets the same
reply. Claude Code's side-requests (a title, a summary, a quota probe: no tools) get a short
text without consuming the script.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from typing import Any

from loopback_server import (
    Body,
    Call,
    Loopback,
    LoopbackHandler,
    Seen,
    Text,
    listed,
    model_named,
    user_first,
)

SIDE_TEXT = "Fix calc add"


ToolUse = Call  # a tool_use block: the tool's name, its input (`args`)
Reply = Text | ToolUse
Step = Reply | Callable[[dict[str, Any]], Reply]


SIDE_PROMPTS = ("[SUGGESTION MODE",)  # Claude Code's guess at the user's next prompt


def is_main(body: dict[str, Any]) -> bool:
    """The agent's own loop sends its tools; its side-requests do not (a session's title) or
    end on a prompt of their own (the next prompt it suggests, on a fork of the loop)."""
    if not body.get("tools"):
        return False
    last = (body.get("messages") or [{}])[-1]
    content = last.get("content")
    texts = (
        [content]
        if isinstance(content, str)
        else [b.get("text") or "" for b in content or [] if isinstance(b, dict)]
    )
    return not any(t.lstrip().startswith(SIDE_PROMPTS) for t in texts)


class AnthropicLoopback(Loopback):
    def handler(self) -> type[LoopbackHandler]:
        return Handler

    def is_model_request(self, seen: Seen) -> bool:
        return seen.path.startswith("/v1/messages") and "count_tokens" not in seen.path


def turn_of(body: dict[str, Any]) -> int:
    """The assistant turns already in the conversation."""
    return sum(1 for m in body.get("messages", []) if m.get("role") == "assistant")


def side_reply(body: dict[str, Any]) -> Reply:
    """A short text, or, when the request asks for JSON (`output_config.format`), an object
    with a short string for each required field (the session title is one)."""
    shape = (body.get("output_config") or {}).get("format") or {}
    if shape.get("type") != "json_schema":
        return Text(SIDE_TEXT)
    required = (shape.get("schema") or {}).get("required") or []
    return Text(json.dumps({name: SIDE_TEXT for name in required}))


def check_body(body: Body) -> list[str]:
    """What the Messages API would refuse in this request body (empty: nothing)."""
    problems = model_named(body)
    if not isinstance(body.get("max_tokens"), int) or body["max_tokens"] < 1:
        problems.append("max_tokens: missing or not a positive integer")
    system = body.get("system")
    if system is not None and not isinstance(system, str | list):
        problems.append("system: neither a string nor a list of blocks")
    if isinstance(system, list) and any(b.get("type") != "text" for b in system):
        problems.append("system: a block that is not text")
    for tool in body.get("tools") or []:
        if "type" not in tool and ("name" not in tool or "input_schema" not in tool):
            problems.append(f"tools: {tool.get('name')!r} lacks a name or an input_schema")
    return listed(body, "messages", problems, check_messages)


def check_messages(messages: list[dict[str, Any]]) -> list[str]:
    problems = user_first(messages, "messages", "message")
    previous_uses: set[str] = set()
    last_role = None
    for i, message in enumerate(messages):
        role, content = message.get("role"), message.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        if not isinstance(blocks, list) or not blocks:
            problems.append(f"messages.{i}: empty content")
            continue
        if role == "system":  # a mid-conversation system turn (Claude Code's beta): text only
            if i == 0 or previous_uses or any(b.get("type") != "text" for b in blocks):
                problems.append(f"messages.{i}: a system turn first, after a tool_use or not text")
            continue
        if role not in ("user", "assistant"):
            problems.append(f"messages.{i}: role {role!r}")
        if role == last_role:
            problems.append(f"messages.{i}: two {role} turns in a row")
        last_role = role
        results = [b.get("tool_use_id") for b in blocks if b.get("type") == "tool_result"]
        if role == "user":
            if any(r not in previous_uses for r in results):
                problems.append(f"messages.{i}: a tool_result answers no tool_use just before it")
            if previous_uses - set(results):
                problems.append(f"messages.{i}: a tool_use of messages.{i - 1} has no tool_result")
            first_other = next(
                (k for k, b in enumerate(blocks) if b.get("type") != "tool_result"), len(blocks)
            )
            if any(b.get("type") == "tool_result" for b in blocks[first_other:]):
                problems.append(f"messages.{i}: a tool_result after other content")
        elif results:
            problems.append(f"messages.{i}: a tool_result in an assistant turn")
        uses = [b.get("id") for b in blocks if b.get("type") == "tool_use"]
        previous_uses = set(uses) if role == "assistant" else set()
    if previous_uses:
        problems.append("the last assistant turn has tool_use blocks and no answer")
    return problems


def _message(model: str, content: list[dict[str, Any]], stop: str | None) -> dict[str, Any]:
    return {
        "id": f"msg_{uuid.uuid4().hex[:24]}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {
            "input_tokens": 120,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
            "output_tokens": 1 if stop is None else 30,
        },
    }


def _blocks(reply: Reply) -> tuple[list[dict[str, Any]], str]:
    if isinstance(reply, Text):
        return [{"type": "text", "text": reply.text}], "end_turn"
    blocks: list[dict[str, Any]] = [{"type": "text", "text": reply.text}] if reply.text else []
    blocks.append(
        {
            "type": "tool_use",
            "id": f"toolu_{uuid.uuid4().hex[:24]}",
            "name": reply.name,
            "input": reply.args,
        }
    )
    return blocks, "tool_use"


def sse_events(model: str, reply: Reply) -> list[tuple[str, dict[str, Any]]]:
    """The reply as the API streams it."""
    blocks, stop = _blocks(reply)
    events: list[tuple[str, dict[str, Any]]] = [
        ("message_start", {"type": "message_start", "message": _message(model, [], None)}),
        ("ping", {"type": "ping"}),
    ]
    for index, block in enumerate(blocks):
        start: dict[str, Any]
        if block["type"] == "text":
            start = {"type": "text", "text": ""}
            text = block["text"]
            deltas = [
                {"type": "text_delta", "text": text[k : k + 16]} for k in range(0, len(text), 16)
            ]
        else:
            start = {**block, "input": {}}
            raw = json.dumps(block["input"])
            deltas = [{"type": "input_json_delta", "partial_json": ""}]
            deltas += [
                {"type": "input_json_delta", "partial_json": raw[k : k + 24]}
                for k in range(0, len(raw), 24)
            ]
        events.append(
            (
                "content_block_start",
                {"type": "content_block_start", "index": index, "content_block": start},
            )
        )
        events += [
            ("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta})
            for delta in deltas
        ]
        events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
    events.append(
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop, "stop_sequence": None},
                "usage": {"output_tokens": 30},
            },
        )
    )
    events.append(("message_stop", {"type": "message_stop"}))
    return events


class Handler(LoopbackHandler):
    def error(self, code: int, message: str) -> dict[str, Any]:
        kind = "not_found_error" if code == 404 else "invalid_request_error"
        return {"type": "error", "error": {"type": kind, "message": message}}

    def auth_problems(self) -> list[str]:
        if self.headers.get("x-api-key") or self.headers.get("authorization"):
            return []
        return ["no x-api-key nor authorization header"]

    def headers_out(self) -> dict[str, str]:
        return {"request-id": f"req_{uuid.uuid4().hex[:24]}"}

    def do_HEAD(self) -> None:
        self.record()
        self.send_response(200)
        self.send_header("content-length", "0")
        self.end_headers()

    def do_GET(self) -> None:
        self.record()
        if self.path.startswith("/v1/models"):
            return self.send_json(
                200, {"data": [], "has_more": False, "first_id": None, "last_id": None}
            )
        self.not_found()

    def do_POST(self) -> None:
        body, seen = self.read_body()
        if not self.path.startswith("/v1/messages"):
            return self.not_found()
        if "count_tokens" in self.path:
            return self.send_json(200, {"input_tokens": 120})
        reply: Reply | None = self.model_reply(body, seen, check_body, is_main, turn_of, side_reply)
        if reply is None:
            return
        if body.get("stream"):
            frames = [
                f"event: {name}\ndata: {json.dumps(data)}\n\n"
                for name, data in sse_events(str(body["model"]), reply)
            ]
            headers = {
                "content-type": "text/event-stream; charset=utf-8",
                "cache-control": "no-cache",
            }
            return self.send_stream(headers, frames)
        blocks, stop = _blocks(reply)
        self.send_json(200, _message(str(body["model"]), blocks, stop))
