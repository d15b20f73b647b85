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

import json
import re
import uuid
from collections.abc import Callable
from typing import Any

from loopback_server import Body, Call, Loopback, LoopbackHandler, Seen, Text, listed, user_first

MODEL = "gemini-2.5-flash"
USAGE = {"promptTokenCount": 120, "candidatesTokenCount": 30, "totalTokenCount": 150}


Reply = Text | Call
Step = Reply | Callable[[dict[str, Any]], Reply]


def is_main(body: dict[str, Any]) -> bool:
    """The agent's own loop sends its tools; its side-requests do not."""
    return any(tool.get("functionDeclarations") for tool in body.get("tools") or [])


class GeminiLoopback(Loopback):
    def handler(self) -> type[LoopbackHandler]:
        return Handler

    def is_model_request(self, seen: Seen) -> bool:
        return "generatecontent" in seen.path.lower()


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


def check_body(body: Body) -> list[str]:
    """What the Gemini API would refuse in this request body (empty: nothing)."""
    problems = []
    system = body.get("systemInstruction")
    if system is not None and not isinstance(system.get("parts"), list):
        problems.append("systemInstruction: no parts")
    for tool in body.get("tools") or []:
        for decl in tool.get("functionDeclarations") or []:
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.\-]{0,63}", str(decl.get("name", ""))):
                problems.append(f"tools: a function name the API refuses: {decl.get('name')!r}")
    return listed(body, "contents", problems, check_contents)


def check_contents(contents: list[dict[str, Any]]) -> list[str]:
    problems = user_first(contents, "contents", "turn")
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


class Handler(LoopbackHandler):
    json_type = "application/json; charset=UTF-8"

    def error(self, code: int, message: str) -> dict[str, Any]:
        status = {400: "INVALID_ARGUMENT", 404: "NOT_FOUND"}.get(code, "UNKNOWN")
        return {"error": {"code": code, "message": message, "status": status}}

    def auth_problems(self) -> list[str]:
        if self.headers.get("x-goog-api-key") or "key=" in self.path:
            return []
        return ["no x-goog-api-key header"]

    def do_GET(self) -> None:
        self.record()
        if "/models" in self.path:
            return self.send_json(200, {"models": [{"name": f"models/{MODEL}"}]})
        self.not_found()

    def do_POST(self) -> None:
        body, seen = self.read_body()
        path = self.path.split("?")[0]
        if path.endswith(":countTokens"):
            return self.send_json(200, {"totalTokens": 120})
        if not path.endswith(("generateContent", "GenerateContent")):
            return self.not_found()
        reply: Reply | None = self.model_reply(body, seen, check_body, is_main, turn_of, side_reply)
        if reply is None:
            return
        if path.endswith(":streamGenerateContent"):
            frames = [f"data: {json.dumps(chunk)}\r\n\r\n" for chunk in chunks(reply)]
            return self.send_stream({"content-type": "text/event-stream"}, frames)
        self.send_json(200, whole(reply))
