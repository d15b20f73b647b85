"""A push whose receiver takes it and never answers (a hung webhook) may have arrived: it is
not pushed again (the explorer's receiver got the same push three times), and the run, the
console and the transcript say it was sent and never confirmed, never that it went."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from test_notify import AFTER_S, FakeClock, _request

from loopdeck.operator.notifications import Notifier
from loopdeck.operator.notify_config import NotifySettings
from loopdeck.operator.push_channels import Channels
from loopdeck.operator.runview import RunView
from loopdeck.operator.transcript import Transcript


@contextmanager
def hung_receiver() -> Iterator[tuple[str, list[bytes]]]:
    """A webhook that reads each request whole and never answers."""
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    taken: list[bytes] = []
    held: list[socket.socket] = []

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            held.append(conn)
            conn.settimeout(5)
            data = b""
            try:
                while b"\r\n\r\n" not in data:
                    data += conn.recv(65536)
                taken.append(data)
            except OSError:
                pass

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"json://127.0.0.1:{port}/hook?cto=2&rto=0.5", taken
    finally:
        server.close()
        for conn in held:
            conn.close()


def test_a_push_its_receiver_took_and_never_answered_is_not_pushed_again() -> None:
    clock, recorded = FakeClock(), []
    with hung_receiver() as (url, taken):
        settings = NotifySettings((url,), after_s=AFTER_S)
        notifier = Notifier(settings, Channels(settings.urls), clock=clock, inline=True,
                            emit=lambda cls, **fields: recorded.append(cls(**fields)))  # fmt: skip
        notifier.take(_request("c1", 1))
        clock.now = AFTER_S
        notifier.tick()
        for later in (2, 3, 4):  # past every retry it would have had
            clock.now = later * AFTER_S
            notifier.tick()
        assert len(taken) == 1
    [push] = recorded
    assert push.channels == []
    [why] = push.failed
    assert why.startswith("json: sent, never confirmed (the receiver took it and did not")
    assert why.endswith("not tried again, it may have arrived")
    assert notifier.plan.wake() is None
    view, transcript = RunView(), Transcript()
    view.apply(push)
    transcript.apply(push)
    assert view.pushed["c1"].startswith("pushed, never confirmed, at ")
    assert transcript.entries[-1].title == "pushed, never confirmed · c1 (approval)"
    assert "not sent" not in transcript.entries[-1].body


def test_a_push_that_never_left_is_still_tried_again() -> None:
    clock, recorded = FakeClock(), []
    dead = ("json://127.0.0.1:9/nobody",)  # nothing listens: it never went
    notifier = Notifier(
        NotifySettings(dead, after_s=AFTER_S), Channels(dead), clock=clock, inline=True,
        emit=lambda cls, **fields: recorded.append(cls(**fields)),
    )  # fmt: skip
    notifier.take(_request("c1", 1))
    clock.now = AFTER_S
    notifier.tick()
    [push] = recorded
    assert "never confirmed" not in push.failed[0]
    assert notifier.plan.wake() == 2 * AFTER_S
