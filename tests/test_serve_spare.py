"""The console `loopdeck serve` keeps started for the next tab: it waits for its tab's size,
textual-serve's first packet, and leaves what follows to the console; one that ended before
its tab came is said, and the tab gets a console started then."""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import json
import logging
import os
from collections.abc import Iterator

import aiohttp
import pytest
from test_serve import a_server, client_of
from textual_serve.app_service import AppService

from loopdeck.cli import spare_console
from loopdeck.cli.serve_auth import ConsoleServer
from loopdeck.cli.spare_console import BadStart, tab_size


@pytest.fixture
def pipe() -> Iterator[tuple[int, int]]:
    read, write = os.pipe()
    yield read, write
    for fd in (read, write):
        with contextlib.suppress(OSError):  # a test closed it
            os.close(fd)


def packet(kind: bytes, payload: bytes) -> bytes:
    """What textual-serve writes to an app's stdin (`AppService.encode_packet`)."""
    return AppService.encode_packet(kind, payload)  # type: ignore[arg-type]


def resize(width: int, height: int) -> bytes:
    return packet(b"M", json.dumps({"type": "resize", "width": width, "height": height}).encode())


def test_the_first_packet_is_the_tabs_size_and_what_follows_is_left(pipe: tuple[int, int]) -> None:
    read, write = pipe
    keys = packet(b"D", b"n")
    os.write(write, resize(171, 52) + keys)
    assert tab_size(read) == (171, 52)
    assert os.read(read, 100) == keys  # the web driver's to read


def test_stdin_closed_before_a_tab_came_is_no_tab(pipe: tuple[int, int]) -> None:
    read, write = pipe
    os.write(write, resize(80, 24)[:7])
    os.close(write)
    assert tab_size(read) is None


@pytest.mark.parametrize(
    ("first", "said"),
    [
        (packet(b"D", b"n"), "not a resize"),
        (packet(b"M", b'{"type": "focus"}'), "'focus', not a resize"),
        (packet(b"M", b"not json"), "not a resize"),
        (packet(b"M", b'{"type": "resize", "width": "wide"}'), "not a resize"),
        (resize(0, 24), "a tab of 0x24 cells"),
    ],
)
def test_anything_else_first_is_refused_naming_it(
    pipe: tuple[int, int], first: bytes, said: str
) -> None:
    read, write = pipe
    os.write(write, first)
    with pytest.raises(BadStart, match=said):
        tab_size(read)


def test_every_module_it_warms_is_there() -> None:
    """A module renamed away would end every spare at its start."""
    for module in spare_console.WARM:
        importlib.import_module(module)


async def ended(server: ConsoleServer) -> None:
    """Until the server's spare console started and ended."""
    while (
        (spare := server.spare.waiting) is None
        or spare._process is None
        or (spare._process.returncode is None)
    ):
        await asyncio.sleep(0.05)


async def test_a_spare_that_ended_before_its_tab_is_said_and_the_tab_gets_a_new_one(
    caplog: pytest.LogCaptureFixture,
) -> None:
    server = a_server("echo the spare broke >&2; exit 3")
    caplog.set_level(logging.WARNING, logger="loopdeck.serve")
    async with client_of(server) as client:
        assert (await client.get("/?token=right-token")).status == 200
        await asyncio.wait_for(ended(server), 30)  # the spare started with the server
        async with client.ws_connect("/ws?width=100&height=30") as websocket:
            closed = await asyncio.wait_for(websocket.receive(), 30)
            assert closed.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED)
    said = "loopdeck serve: a spare console ended before its tab came (exit 3: the spare broke)"
    assert said in [r.getMessage() for r in caplog.records]
