"""A loopback upstream for the gateway's tests that need answers the scripted loopbacks do not
make: several choices, the Responses API's built-in call items, an upstream failure with its
own status and headers. Each model request (a POST to `/v1/chat/completions`,
`/v1/responses` or `/v1/messages`) is answered by the next reply of the list, a function of
the request body giving `(status, JSON body, headers)`; every body is recorded.

The Responses API's stored conversation is kept as the API keeps it: an answer is stored by
its id, and a request going on from it (`previous_response_id`) must carry an output for each
call the client runs in it, or it gets the API's 400 ("No tool output found for function
call …"), recorded in `problems`; an input item of a type the API does not take (neither one
of the `openai` SDK's input items nor a type this upstream answered with) gets its 400 too.
"""

from __future__ import annotations

import functools
import json
import threading
import time
import typing
import uuid
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Body = dict[str, Any]
Reply = Callable[[Body], tuple[int, Body, dict[str, str]]]
SERVER_RUN = ("web_search_call", "file_search_call", "code_interpreter_call", "mcp_call")
USAGE_CHAT = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
USAGE_RESPONSES = {"input_tokens": 10, "output_tokens": 5, "total_tokens": 15}


class RawUpstream:
    def __init__(self, replies: list[Reply]) -> None:
        self.replies = list(replies)
        self.bodies: list[Body] = []
        self.problems: list[str] = []
        self.stored: dict[str, list[Body]] = {}  # a Responses answer's id -> its output
        self.lock = threading.Lock()
        upstream = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *_: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))))
                status, data, headers = upstream.reply(self.path, body)
                raw = json.dumps(data).encode()
                self.send_response(status)
                for name, value in {"content-type": "application/json", **headers}.items():
                    self.send_header(name, value)
                self.send_header("content-length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def root(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> RawUpstream:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def reply(self, path: str, body: Body) -> tuple[int, Body, dict[str, str]]:
        with self.lock:
            self.bodies.append(body)
            problem = None
            if path.endswith("/responses"):
                problem = self._invalid(body) or self._unanswered(body)
            if problem:
                self.problems.append(problem)
                return 400, {"error": {"message": problem, "type": "invalid_request_error",
                                       "param": "input", "code": None}}, {}  # fmt: skip
            if not self.replies:
                return 500, {"error": {"message": "no reply left", "type": "server_error"}}, {}
            status, data, headers = self.replies.pop(0)(body)
            if path.endswith("/responses") and status == 200:
                self.stored[str(data["id"])] = list(data.get("output") or [])
            return status, data, headers

    def _invalid(self, body: Body) -> str | None:
        """The API's refusal of an input item whose type it does not take."""
        given = body.get("input")
        answered = {str(i.get("type")) for out in self.stored.values() for i in out}
        for i in given if isinstance(given, list) else []:
            kind = str(i.get("type") or "message") if isinstance(i, dict) else "?"
            if kind not in input_kinds() | answered:
                return f"Invalid value: '{kind}'. Supported values are: ..."
        return None

    def _unanswered(self, body: Body) -> str | None:
        earlier = body.get("previous_response_id")
        if not earlier:
            return None
        given = body.get("input")
        answered = {str(i.get("call_id")) for i in given if isinstance(i, dict)} if isinstance(
            given, list
        ) else set()  # fmt: skip
        for item in self.stored.get(str(earlier), []):
            kind = str(item.get("type"))
            runs = kind.endswith("_call") and kind not in SERVER_RUN
            runs = runs and item.get("execution") != "server"  # the server's own tool search
            if runs and str(item.get("call_id")) not in answered:
                return f"No tool output found for {kind.replace('_', ' ')} {item['call_id']}."
        return None


@functools.cache
def input_kinds() -> frozenset[str]:
    """The input item types the Responses API takes, as the `openai` SDK lists them."""
    from openai.types.responses.response_input_item_param import ResponseInputItemParam

    kinds: set[str] = set()
    for shape in typing.get_args(ResponseInputItemParam):
        said = typing.get_type_hints(shape).get("type")
        while typing.get_args(said) and not isinstance(typing.get_args(said)[0], str):
            said = typing.get_args(said)[0]  # Required[Literal[...]] -> Literal[...]
        kinds |= set(typing.get_args(said))
    return frozenset(kinds)


def chat(*messages: Body) -> Reply:
    """A chat answer whose choices are `messages` (each an assistant message)."""

    def reply(body: Body) -> tuple[int, Body, dict[str, str]]:
        choices = [
            {"index": i, "message": {"role": "assistant", **m},
             "finish_reason": "tool_calls" if m.get("tool_calls") else "stop"}
            for i, m in enumerate(messages)
        ]  # fmt: skip
        return 200, {"id": f"chatcmpl-{uuid.uuid4().hex[:12]}", "object": "chat.completion",
                     "created": int(time.time()), "model": str(body.get("model")),
                     "choices": choices, "usage": USAGE_CHAT}, {}  # fmt: skip

    return reply


def tool_call(name: str, args: Body) -> Body:
    return {"id": f"call_{uuid.uuid4().hex[:12]}", "type": "function",
            "function": {"name": name, "arguments": json.dumps(args)}}  # fmt: skip


def responses(*items: Body) -> Reply:
    """A Responses answer whose output is `items`."""

    def reply(body: Body) -> tuple[int, Body, dict[str, str]]:
        return 200, {"id": f"resp_{uuid.uuid4().hex[:12]}", "object": "response",
                     "created_at": int(time.time()), "status": "completed",
                     "model": str(body.get("model")), "output": list(items),
                     "usage": USAGE_RESPONSES}, {}  # fmt: skip

    return reply


def said(text: str) -> Body:
    return {"type": "message", "id": f"msg_{uuid.uuid4().hex[:12]}", "status": "completed",
            "role": "assistant",
            "content": [{"type": "output_text", "text": text, "annotations": []}]}  # fmt: skip


def item(kind: str, **fields: Any) -> Body:
    """An output item of `kind` with a call id."""
    return {"type": kind, "id": f"it_{uuid.uuid4().hex[:12]}",
            "call_id": f"call_{uuid.uuid4().hex[:12]}", "status": "completed",
            **fields}  # fmt: skip


def failing(status: int, data: Body, headers: dict[str, str]) -> Reply:
    return lambda body: (status, data, headers)
