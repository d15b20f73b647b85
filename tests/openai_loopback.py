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

import contextlib
import json
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

SIDE_TEXT = "Fix calc add"
USAGE_IN, USAGE_OUT = 120, 30


@dataclass(frozen=True)
class Text:
    text: str


@dataclass(frozen=True)
class Call:
    name: str
    args: dict[str, Any] | str  # a string: a custom (freeform) tool's input, as Codex's apply_patch
    text: str = ""  # said before the call, as the model often does


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


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: dict[str, Any] = field(default_factory=dict)
    side: bool = False
    problems: list[str] = field(default_factory=list)


class OpenAILoopback:
    def __init__(self, script: list[Step]) -> None:
        self.script = script
        self.seen: list[Seen] = []
        self.lock = threading.Lock()
        self.hang = False  # main-loop requests wait for `release` (or the server's end)
        self.hang_from: int | None = None  # ... or those from this model turn on (0: the first)
        self.hanging = threading.Event()  # a main-loop request is being held
        self._released = threading.Event()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        """The base URL with its `/v1`, as OpenAI clients take it."""
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def __enter__(self) -> OpenAILoopback:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._released.set()
        self._server.shutdown()
        self._server.server_close()

    # -- what the test reads ------------------------------------------------------------------
    def main_requests(self) -> list[Seen]:
        with self.lock:
            return [s for s in self.seen if s.method == "POST" and s.body and not s.side]

    def problems(self) -> list[str]:
        with self.lock:
            return [f"{s.method} {s.path}: {p}" for s in self.seen for p in s.problems]

    # -- answering ------------------------------------------------------------------------------
    def holds(self, turn: int) -> bool:
        return self.hang or (self.hang_from is not None and turn >= self.hang_from)

    def reply_to(self, body: dict[str, Any], turn: int) -> Reply:
        if turn >= len(self.script):
            return Text(f"(the loopback script has no reply {turn + 1})")
        step = self.script[turn]
        return step if isinstance(step, Text | Call | Calls) else step(body)

    def hold(self) -> None:
        self.hanging.set()
        self._released.wait()


# -- chat completions ----------------------------------------------------------------------------
def chat_turns(body: dict[str, Any]) -> int:
    return sum(1 for m in body.get("messages") or [] if m.get("role") == "assistant")


def check_chat(body: Any) -> list[str]:
    if not isinstance(body, dict):
        return ["the body is not a JSON object"]
    problems = []
    if not isinstance(body.get("model"), str) or not body["model"]:
        problems.append("model: missing")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return [*problems, "messages: missing or empty"]
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


def check_responses(body: Any) -> list[str]:
    if not isinstance(body, dict):
        return ["the body is not a JSON object"]
    problems = []
    if not isinstance(body.get("model"), str) or not body["model"]:
        problems.append("model: missing")
    items = body.get("input")
    if isinstance(items, str):
        return problems
    if not isinstance(items, list) or not items:
        return [*problems, "input: missing or empty"]
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


def _handler(api: OpenAILoopback) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *_: Any) -> None:
            pass

        def handle(self) -> None:
            with contextlib.suppress(ConnectionError):  # an agent killed mid-request
                super().handle()

        def _seen(self, body: dict[str, Any] | None = None) -> Seen:
            seen = Seen(self.command, self.path, dict(self.headers.items()), body or {})
            with api.lock:
                api.seen.append(seen)
            return seen

        def _json(self, code: int, data: Any) -> None:
            raw = json.dumps(data).encode()
            self.send_response(code)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def do_GET(self) -> None:
            self._seen()
            if self.path.split("?")[0].endswith("/models"):
                model = {"id": "loop-model", "object": "model", "owned_by": "loopback"}
                return self._json(200, {"object": "list", "data": [model]})
            self._json(404, _error(f"{self.path}: not found"))

        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("content-length") or 0))
            try:
                body = json.loads(raw or b"{}")
            except ValueError:
                body = None
            seen = self._seen(body if isinstance(body, dict) else {})
            path = self.path.split("?")[0]
            if path.endswith("/chat/completions"):
                seen.problems = check_chat(body)
            elif path.endswith("/responses"):
                seen.problems = check_responses(body)
            else:
                return self._json(404, _error(f"{self.path}: not found"))
            if not self.headers.get("authorization"):
                seen.problems.append("no authorization header")
            if seen.problems:
                return self._json(400, _error("; ".join(seen.problems)))
            assert isinstance(body, dict)
            seen.side = not body.get("tools")
            model = str(body["model"])
            chat = path.endswith("/chat/completions")
            if seen.side:
                reply: Reply = Text(SIDE_TEXT)
            else:
                turn = chat_turns(body) if chat else responses_turns(body)
                if api.holds(turn):
                    api.hold()
                    return
                reply = api.reply_to(body, turn)
            if not body.get("stream"):
                if chat:
                    return self._json(200, chat_whole(model, reply))
                return self._json(200, response_events(model, reply)[-1]["response"])
            if chat:
                usage = bool((body.get("stream_options") or {}).get("include_usage"))
                return self._stream([(None, c) for c in chat_chunks(model, reply, usage)], True)
            self._stream([(e["type"], e) for e in response_events(model, reply)], False)

        def _stream(self, events: list[tuple[str | None, dict[str, Any]]], done: bool) -> None:
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("cache-control", "no-cache")
            self.send_header("transfer-encoding", "chunked")
            self.end_headers()
            frames = [
                (f"event: {name}\n" if name else "") + f"data: {json.dumps(data)}\n\n"
                for name, data in events
            ]
            if done:
                frames.append("data: [DONE]\n\n")
            for frame in frames:
                chunk = frame.encode()
                self.wfile.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()

    return Handler


def _error(message: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": "invalid_request_error", "param": None,
                      "code": None}}  # fmt: skip
