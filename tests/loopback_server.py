"""What the loopback model servers share (`openai_loopback.py`, `gemini_loopback.py`,
`anthropic_loopback.py`): an HTTP server on a free loopback port, in a thread of its own while
the server is entered; every request recorded (`Seen`); a request body the API would refuse
answered with the API's 400, naming what it refuses; the script played by the conversation
(the reply to a main-loop request is the script's entry at the number of model turns already
in it, so a retried request gets the same reply; a side-request gets its own short reply
without consuming the script); main-loop requests held on demand (`hang`, `hang_from`) until
the server ends; a streamed reply sent chunked.

Each provider's module keeps its own rules: its paths, what it checks in a body, how it counts
turns, its replies, its streams and its error body.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar, Self

Body = dict[str, Any]


@dataclass(frozen=True)
class Text:
    text: str


@dataclass(frozen=True)
class Call:
    """A tool call the model makes: its tool's name and input (a string: a custom, freeform
    tool's input, as Codex's apply_patch)."""

    name: str
    args: dict[str, Any] | str
    text: str = ""  # said before the call, as the model often does


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: dict[str, Any] = field(default_factory=dict)
    side: bool = False
    problems: list[str] = field(default_factory=list)


def model_named(body: Body) -> list[str]:
    """What the API refuses in `model` (the OpenAI and Anthropic APIs): a name, not empty."""
    return [] if isinstance(body.get("model"), str) and body["model"] else ["model: missing"]


def listed(
    body: Body, key: str, problems: list[str], check: Callable[[list[Any]], list[str]]
) -> list[str]:
    """`problems`, and what `check` finds in the conversation `body[key]`: a list, not empty."""
    items = body.get(key)
    if not isinstance(items, list) or not items:
        return [*problems, f"{key}: missing or empty"]
    return problems + check(items)


def user_first(items: list[Any], key: str, what: str) -> list[str]:
    """What the API refuses in a conversation that the user does not open (Gemini, Anthropic)."""
    if items[0].get("role") == "user":
        return []
    return [f"{key}.0: the first {what} is not the user's"]


class LoopbackHandler(BaseHTTPRequestHandler):
    """One request to a loopback server (`api`: the server it was made for)."""

    protocol_version = "HTTP/1.1"
    api: ClassVar[Loopback]
    json_type: ClassVar[str] = "application/json"

    def log_message(self, *_: Any) -> None:
        pass

    def handle(self) -> None:
        with contextlib.suppress(ConnectionError):  # an agent killed mid-request
            super().handle()

    # -- the provider's own ---------------------------------------------------------------------
    def error(self, code: int, message: str) -> dict[str, Any]:
        """The API's error body for an answer with HTTP status `code`."""
        raise NotImplementedError

    def auth_problems(self) -> list[str]:
        """What the API would refuse in the request's headers: its key missing."""
        raise NotImplementedError

    def headers_out(self) -> dict[str, str]:
        """The headers every answer carries besides its content's own."""
        return {}

    # -- recording, answering ---------------------------------------------------------------------
    def record(self, body: dict[str, Any] | None = None) -> Seen:
        seen = Seen(self.command, self.path, dict(self.headers.items()), body or {})
        with self.api.lock:
            self.api.seen.append(seen)
        return seen

    def read_body(self) -> tuple[Any, Seen]:
        """The request's JSON body (None: not JSON), the request recorded."""
        raw = self.rfile.read(int(self.headers.get("content-length") or 0))
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            body = None
        return body, self.record(body if isinstance(body, dict) else {})

    def send_json(self, code: int, data: Any) -> None:
        raw = json.dumps(data).encode()
        self.send_response(code)
        self.send_header("content-type", self.json_type)
        for name, value in self.headers_out().items():
            self.send_header(name, value)
        self.send_header("content-length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def not_found(self) -> None:
        self.send_json(404, self.error(404, f"{self.path}: not found"))

    def model_reply(
        self,
        body: Any,
        seen: Seen,
        check: Callable[[Body], list[str]],
        main: Callable[[Body], bool],
        turns: Callable[[Body], int],
        side_reply: Callable[[Body], Any],
    ) -> Any:
        """The reply to a request for the model's (`Loopback.answer`), or None: the request
        held, or one the API would refuse (what `check` finds in its body, `auth_problems` in its
        headers, kept on `seen`), answered here with the API's 400 naming what it refuses."""
        problems = check(body) if isinstance(body, dict) else ["the body is not a JSON object"]
        seen.problems = problems + self.auth_problems()
        if seen.problems:
            self.send_json(400, self.error(400, "; ".join(seen.problems)))
            return None
        return self.api.answer(seen, body, main(body), turns, side_reply)

    def send_stream(self, headers: dict[str, str], frames: list[str]) -> None:
        """A 200 whose body is `frames`, each a chunk of its own."""
        self.send_response(200)
        for name, value in {**headers, **self.headers_out()}.items():
            self.send_header(name, value)
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        for frame in frames:
            chunk = frame.encode()
            self.wfile.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


class Loopback:
    """A loopback model server playing `script` (each step a reply, or a function of the
    request body that gives one), entered for as long as the test needs it."""

    url_path: ClassVar[str] = ""  # what the base URL adds to the host and port

    def __init__(self, script: list[Any]) -> None:
        self.script = script
        self.seen: list[Seen] = []
        self.lock = threading.Lock()
        self.hang = False  # main-loop requests wait for `release` (or the server's end)
        self.hang_from: int | None = None  # ... or those from this model turn on (0: the first)
        self.hanging = threading.Event()  # a main-loop request is being held
        self._released = threading.Event()
        handler = type("Handler", (self.handler(),), {"api": self})
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    # -- the provider's own -----------------------------------------------------------------------
    def handler(self) -> type[LoopbackHandler]:
        raise NotImplementedError

    def is_model_request(self, seen: Seen) -> bool:
        """Whether `seen` asked the model for a reply (side-requests included)."""
        raise NotImplementedError

    # -- the server -------------------------------------------------------------------------------
    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}{self.url_path}"

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._released.set()
        self._server.shutdown()
        self._server.server_close()

    def release(self) -> None:
        self._released.set()

    # -- what the test reads ----------------------------------------------------------------------
    def main_requests(self) -> list[Seen]:
        with self.lock:
            return [s for s in self.seen if self.is_model_request(s) and not s.side]

    def problems(self) -> list[str]:
        with self.lock:
            return [f"{s.method} {s.path}: {p}" for s in self.seen for p in s.problems]

    # -- answering --------------------------------------------------------------------------------
    def holds(self, turn: int) -> bool:
        return self.hang or (self.hang_from is not None and turn >= self.hang_from)

    def reply_to(self, body: dict[str, Any], turn: int) -> Any:
        if turn >= len(self.script):
            return Text(f"(the loopback script has no reply {turn + 1})")
        step = self.script[turn]
        return step(body) if callable(step) else step

    def hold(self) -> None:
        self.hanging.set()
        self._released.wait()

    def answer(
        self,
        seen: Seen,
        body: Body,
        main: bool,
        turns: Callable[[Body], int],
        side_reply: Callable[[Body], Any],
    ) -> Any:
        """The reply to a request the API would take: a side-request's from `side_reply`, a
        main-loop request's the script's for its model turns so far (`turns`); None for a held
        request, let go unanswered at the server's end."""
        seen.side = not main
        if seen.side:
            return side_reply(body)
        turn = turns(body)
        if self.holds(turn):
            self.hold()
            return None
        return self.reply_to(body, turn)
