"""A loopback Gemini API (`generateContent`, `streamGenerateContent`, `countTokens`) for Gemini
CLI run offline under loopdeck (`GOOGLE_GEMINI_BASE_URL`): it plays a script of replies, streamed
as the API streams them (`?alt=sse`), and checks each request body as the API would (roles
`user` and `model` only, the first turn the user's, each `functionResponse` in the user turn
right after the model turn whose `functionCall`s it answers, one for each, by name and id),
answering a request it would refuse with the API's 400. Every request is recorded.

The script is played by the conversation: the reply to a main-loop request (one that sends
tools) is the script's entry at the number of model turns already in it, so a retried request
gets the same reply. Gemini CLI's side-requests (no tools: a next-speaker check, a loop check,
a title) get a short JSON or text reply without consuming the script.
"""

from __future__ import annotations

import contextlib
import json
import re
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MODEL = "gemini-2.5-flash"
USAGE = {"promptTokenCount": 120, "candidatesTokenCount": 30, "totalTokenCount": 150}


@dataclass(frozen=True)
class Text:
    text: str


@dataclass(frozen=True)
class Call:
    name: str
    args: dict[str, Any]
    text: str = ""  # said before the call, as the model often does


Reply = Text | Call
Step = Reply | Callable[[dict[str, Any]], Reply]


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: dict[str, Any] = field(default_factory=dict)
    side: bool = False
    problems: list[str] = field(default_factory=list)


def is_main(body: dict[str, Any]) -> bool:
    """The agent's own loop sends its tools; its side-requests do not."""
    return any(tool.get("functionDeclarations") for tool in body.get("tools") or [])


class GeminiLoopback:
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
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> GeminiLoopback:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._released.set()
        self._server.shutdown()
        self._server.server_close()

    # -- what the test reads ------------------------------------------------------------------
    def main_requests(self) -> list[Seen]:
        with self.lock:
            return [s for s in self.seen if "generatecontent" in s.path.lower() and not s.side]

    def problems(self) -> list[str]:
        with self.lock:
            return [f"{s.method} {s.path}: {p}" for s in self.seen for p in s.problems]

    # -- answering ------------------------------------------------------------------------------
    def holds(self, body: dict[str, Any]) -> bool:
        return self.hang or (self.hang_from is not None and turn_of(body) >= self.hang_from)

    def reply_to(self, body: dict[str, Any]) -> Reply:
        turn = turn_of(body)
        if turn >= len(self.script):
            return Text(f"(the loopback script has no reply {turn + 1})")
        step = self.script[turn]
        return step if isinstance(step, Text | Call) else step(body)

    def hold(self) -> None:
        self.hanging.set()
        self._released.wait()


def turn_of(body: dict[str, Any]) -> int:
    """The model turns already in the conversation."""
    return sum(1 for c in body.get("contents", []) if c.get("role") == "model")


def side_reply(body: dict[str, Any]) -> Text:
    """A short text, or, when the request asks for JSON, an object that fits its schema's
    required fields (Gemini CLI's next-speaker check wants `next_speaker`: the user)."""
    config = body.get("generationConfig") or {}
    schema = config.get("responseJsonSchema") or config.get("responseSchema")
    if config.get("responseMimeType") != "application/json" or not isinstance(schema, dict):
        return Text("Fix calc add")
    answer: dict[str, Any] = {}
    for name, prop in (schema.get("properties") or {}).items():
        kind = str(prop.get("type", "string")).lower()
        if prop.get("enum"):
            answer[name] = "user" if "user" in prop["enum"] else prop["enum"][0]
        elif kind == "boolean":
            answer[name] = False
        elif kind in ("number", "integer"):
            answer[name] = 0
        elif kind == "array":
            answer[name] = []
        elif kind == "object":
            answer[name] = {}
        else:
            answer[name] = "user" if name == "next_speaker" else "no"
    return Text(json.dumps(answer))


def check_body(body: Any) -> list[str]:
    """What the Gemini API would refuse in this request body (empty: nothing)."""
    if not isinstance(body, dict):
        return ["the body is not a JSON object"]
    problems = []
    system = body.get("systemInstruction")
    if system is not None and not isinstance(system.get("parts"), list):
        problems.append("systemInstruction: no parts")
    for tool in body.get("tools") or []:
        for decl in tool.get("functionDeclarations") or []:
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.\-]{0,63}", str(decl.get("name", ""))):
                problems.append(f"tools: a function name the API refuses: {decl.get('name')!r}")
    contents = body.get("contents")
    if not isinstance(contents, list) or not contents:
        return [*problems, "contents: missing or empty"]
    return problems + check_contents(contents)


def check_contents(contents: list[dict[str, Any]]) -> list[str]:
    problems = []
    if contents[0].get("role") != "user":
        problems.append("contents.0: the first turn is not the user's")
    calls: list[tuple[str, str | None]] = []  # the model turn just before: (name, id)
    for i, content in enumerate(contents):
        role, parts = content.get("role"), content.get("parts")
        if role not in ("user", "model"):
            problems.append(f"contents.{i}: role {role!r}")
        if not isinstance(parts, list) or not parts:
            problems.append(f"contents.{i}: no parts")
            calls = []
            continue
        answers = [p["functionResponse"] for p in parts if "functionResponse" in p]
        if role == "user":
            if calls or answers:
                names = sorted(a.get("name", "") for a in answers)
                if names != sorted(name for name, _ in calls):
                    problems.append(
                        f"contents.{i}: function responses {names} do not answer the calls of"
                        f" contents.{i - 1} {sorted(n for n, _ in calls)}"
                    )
                ids = {cid for _, cid in calls if cid}
                if ids and {a.get("id") for a in answers} != ids:
                    problems.append(f"contents.{i}: function response ids do not match the calls'")
        elif answers:
            problems.append(f"contents.{i}: a functionResponse in a model turn")
        if role == "model":
            calls = [
                (p["functionCall"].get("name", ""), p["functionCall"].get("id"))
                for p in parts
                if "functionCall" in p
            ]
            if i > 0 and contents[i - 1].get("role") == "model":
                problems.append(f"contents.{i}: two model turns in a row")
        else:
            calls = []
    if calls:
        problems.append("the last model turn has function calls and no answer")
    return problems


def parts_of(reply: Reply) -> tuple[list[dict[str, Any]], str]:
    if isinstance(reply, Text):
        return [{"text": reply.text}], "STOP"
    parts: list[dict[str, Any]] = [{"text": reply.text}] if reply.text else []
    parts.append({"functionCall": {"name": reply.name, "args": reply.args}})
    return parts, "STOP"


def chunks(reply: Reply) -> list[dict[str, Any]]:
    """The reply as the API streams it: text in pieces, a function call whole, the finish
    reason and the usage on the last chunk."""
    parts, finish = parts_of(reply)
    pieces: list[list[dict[str, Any]]] = []
    for part in parts:
        if "text" in part:
            text = part["text"]
            pieces += [[{"text": text[k : k + 16]}] for k in range(0, len(text), 16)]
        else:
            pieces.append([part])
    out = []
    for n, piece in enumerate(pieces):
        candidate: dict[str, Any] = {"content": {"role": "model", "parts": piece}, "index": 0}
        chunk: dict[str, Any] = {"candidates": [candidate], "modelVersion": MODEL}
        if n == len(pieces) - 1:
            candidate["finishReason"] = finish
            chunk["usageMetadata"] = USAGE
        chunk["responseId"] = uuid.uuid4().hex[:20]
        out.append(chunk)
    return out


def whole(reply: Reply) -> dict[str, Any]:
    parts, finish = parts_of(reply)
    return {
        "candidates": [
            {"content": {"role": "model", "parts": parts}, "finishReason": finish, "index": 0}
        ],
        "usageMetadata": USAGE,
        "modelVersion": MODEL,
        "responseId": uuid.uuid4().hex[:20],
    }


def _handler(api: GeminiLoopback) -> type[BaseHTTPRequestHandler]:
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
            self.send_header("content-type", "application/json; charset=UTF-8")
            self.send_header("content-length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def do_GET(self) -> None:
            self._seen()
            if "/models" in self.path:
                return self._json(200, {"models": [{"name": f"models/{MODEL}"}]})
            self._json(404, _error(404, f"{self.path}: not found"))

        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("content-length") or 0))
            try:
                body = json.loads(raw or b"{}")
            except ValueError:
                body = None
            seen = self._seen(body if isinstance(body, dict) else {})
            path = self.path.split("?")[0]
            if path.endswith(":countTokens"):
                return self._json(200, {"totalTokens": 120})
            if not path.endswith(("generateContent", "GenerateContent")):
                return self._json(404, _error(404, f"{self.path}: not found"))
            seen.problems = check_body(body)
            if not self.headers.get("x-goog-api-key") and "key=" not in self.path:
                seen.problems.append("no x-goog-api-key header")
            if seen.problems:
                return self._json(400, _error(400, "; ".join(seen.problems)))
            assert isinstance(body, dict)
            seen.side = not is_main(body)
            if seen.side:
                reply: Reply = side_reply(body)
            else:
                if api.holds(body):
                    api.hold()
                    return
                reply = api.reply_to(body)
            if path.endswith(":streamGenerateContent"):
                return self._stream(reply)
            self._json(200, whole(reply))

        def _stream(self, reply: Reply) -> None:
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("transfer-encoding", "chunked")
            self.end_headers()
            for chunk in chunks(reply):
                data = f"data: {json.dumps(chunk)}\r\n\r\n".encode()
                self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()

    return Handler


def _error(code: int, message: str) -> dict[str, Any]:
    status = {400: "INVALID_ARGUMENT", 404: "NOT_FOUND"}.get(code, "UNKNOWN")
    return {"error": {"code": code, "message": message, "status": status}}
