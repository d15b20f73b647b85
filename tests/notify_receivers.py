"""Loopback servers the notification tests run: a webhook receiver (what Apprise's `json://`
posts) and an ntfy-compatible server (what its `ntfy://` posts: JSON with the topic, title
and message, answered as ntfy answers). Each keeps what it received, in order."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class Received:
    """What a server took: each request's path, headers and JSON body."""

    def __init__(self) -> None:
        self.items: list[dict[str, Any]] = []
        self.lock = threading.Lock()

    def add(self, item: dict[str, Any]) -> None:
        with self.lock:
            self.items.append(item)

    def __len__(self) -> int:
        with self.lock:
            return len(self.items)

    def wait_for(self, count: int, timeout: float = 60) -> list[dict[str, Any]]:
        end = time.monotonic() + timeout
        while len(self) < count:
            assert time.monotonic() < end, f"only {len(self)} of {count} pushes came"
            time.sleep(0.02)
        with self.lock:
            return list(self.items)


def _handler(received: Received, answer: dict[str, Any]) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length) or b"{}")
            received.add({"path": self.path, "headers": dict(self.headers), "body": body})
            said = json.dumps({**answer, "time": int(time.time())}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(said)))
            self.end_headers()
            self.wfile.write(said)

        def log_message(self, *args: Any) -> None:
            pass

    return Handler


@contextmanager
def serving(answer: dict[str, Any]) -> Iterator[tuple[str, Received]]:
    received = Received()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(received, answer))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}", received
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def webhook() -> Iterator[tuple[str, Received]]:
    """A webhook: `json://HOST:PORT/hook` posts its pushes here."""
    with serving({"ok": True}) as (where, received):
        yield f"json://{where}/hook", received


@contextmanager
def ntfy(topic: str = "decisions") -> Iterator[tuple[str, Received]]:
    """An ntfy-compatible server: `ntfy://HOST:PORT/TOPIC` publishes here, as JSON."""
    with serving({"id": "m1", "event": "message", "topic": topic}) as (where, received):
        yield f"ntfy://{where}/{topic}", received
