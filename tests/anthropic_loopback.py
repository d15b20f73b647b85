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
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

SIDE_TEXT = "Fix calc add"


@dataclass(frozen=True)
class Text:
    text: str


@dataclass(frozen=True)
class ToolUse:
    name: str
    input: dict[str, Any]
    text: str = ""  # said before the call, as the model often does


Reply = Text | ToolUse
Step = Reply | Callable[[dict[str, Any]], Reply]


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: dict[str, Any] = field(default_factory=dict)
    side: bool = False
    problems: list[str] = field(default_factory=list)


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


class AnthropicLoopback:
    def __init__(self, script: list[Step]) -> None:
        self.script = script
        self.seen: list[Seen] = []
        self.lock = threading.Lock()
        self.hang = False  # main-loop requests wait for `release` (or the server's end)
        self.hanging = threading.Event()  # a main-loop request is being held
        self._released = threading.Event()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        port = self._server.server_address[1]
        return f"http://127.0.0.1:{port}"

    def __enter__(self) -> AnthropicLoopback:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._released.set()
        self._server.shutdown()
        self._server.server_close()

    def release(self) -> None:
        self._released.set()

    # -- what the test reads ------------------------------------------------------------------
    def main_requests(self) -> list[Seen]:
        with self.lock:
            return [
                s
                for s in self.seen
                if s.path.startswith("/v1/messages") and not s.side and "count_tokens" not in s.path
            ]

    def problems(self) -> list[str]:
        with self.lock:
            return [f"{s.method} {s.path}: {p}" for s in self.seen for p in s.problems]

    # -- answering ------------------------------------------------------------------------------
    def reply_to(self, body: dict[str, Any]) -> Reply:
        turn = sum(1 for m in body.get("messages", []) if m.get("role") == "assistant")
        if turn >= len(self.script):
            return Text(f"(the loopback script has no reply {turn + 1})")
        step = self.script[turn]
        return step if isinstance(step, Text | ToolUse) else step(body)

    def hold(self) -> None:
        self.hanging.set()
        self._released.wait()


def side_reply(body: dict[str, Any]) -> Reply:
    """A short text, or, when the request asks for JSON (`output_config.format`), an object
    with a short string for each required field (the session title is one)."""
    shape = (body.get("output_config") or {}).get("format") or {}
    if shape.get("type") != "json_schema":
        return Text(SIDE_TEXT)
    required = (shape.get("schema") or {}).get("required") or []
    return Text(json.dumps({name: SIDE_TEXT for name in required}))


def check_body(body: Any) -> list[str]:
    """What the Messages API would refuse in this request body (empty: nothing)."""
    if not isinstance(body, dict):
        return ["the body is not a JSON object"]
    problems = []
    if not isinstance(body.get("model"), str) or not body["model"]:
        problems.append("model: missing")
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
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return [*problems, "messages: missing or empty"]
    return problems + check_messages(messages)


def check_messages(messages: list[dict[str, Any]]) -> list[str]:
    problems = []
    if messages[0].get("role") != "user":
        problems.append("messages.0: the first message is not the user's")
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
            "input": reply.input,
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


def _handler(api: AnthropicLoopback) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *_: Any) -> None:
            pass

        def _seen(self, body: dict[str, Any] | None = None) -> Seen:
            seen = Seen(self.command, self.path, dict(self.headers.items()), body or {})
            with api.lock:
                api.seen.append(seen)
            return seen

        def _json(self, code: int, data: Any) -> None:
            raw = json.dumps(data).encode()
            self.send_response(code)
            self.send_header("content-type", "application/json")
            self.send_header("request-id", f"req_{uuid.uuid4().hex[:24]}")
            self.send_header("content-length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def do_HEAD(self) -> None:
            self._seen()
            self.send_response(200)
            self.send_header("content-length", "0")
            self.end_headers()

        def do_GET(self) -> None:
            self._seen()
            if self.path.startswith("/v1/models"):
                return self._json(
                    200, {"data": [], "has_more": False, "first_id": None, "last_id": None}
                )
            self._json(404, _error("not_found_error", f"{self.path}: not found"))

        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("content-length") or 0))
            try:
                body = json.loads(raw or b"{}")
            except ValueError:
                body = None
            seen = self._seen(body if isinstance(body, dict) else {})
            if not self.path.startswith("/v1/messages"):
                return self._json(404, _error("not_found_error", f"{self.path}: not found"))
            if "count_tokens" in self.path:
                return self._json(200, {"input_tokens": 120})
            seen.problems = check_body(body)
            if not self.headers.get("x-api-key") and not self.headers.get("authorization"):
                seen.problems.append("no x-api-key nor authorization header")
            if seen.problems:
                return self._json(400, _error("invalid_request_error", "; ".join(seen.problems)))
            assert isinstance(body, dict)
            seen.side = not is_main(body)
            if seen.side:
                reply: Reply = side_reply(body)
            else:
                if api.hang:
                    api.hold()
                    return
                reply = api.reply_to(body)
            if body.get("stream"):
                return self._stream(str(body["model"]), reply)
            blocks, stop = _blocks(reply)
            self._json(200, _message(str(body["model"]), blocks, stop))

        def _stream(self, model: str, reply: Reply) -> None:
            self.send_response(200)
            self.send_header("content-type", "text/event-stream; charset=utf-8")
            self.send_header("cache-control", "no-cache")
            self.send_header("request-id", f"req_{uuid.uuid4().hex[:24]}")
            self.send_header("transfer-encoding", "chunked")
            self.end_headers()
            for name, data in sse_events(model, reply):
                chunk = f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()
                self.wfile.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()

    return Handler


def _error(kind: str, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": kind, "message": message}}
