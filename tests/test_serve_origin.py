"""`loopdeck serve` answers only its own page: a request's Host and Origin name this server
(loopback, its address, an `--allow-host` name, at its port), and its cookie opens no other
server. A browser counts every port of 127.0.0.1 as one site and sends a host's cookies to
each of its ports, so each socket below carries this server's own cookie: only the Host, the
Origin or the cookie's server refuse it."""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestClient
from test_serve import TOKEN, a_server, client_of, gone, parsed, start_server

from loopdeck.cli import serve, serve_auth

Client = TestClient[Any, Any]
STAYS = "exec sleep 60"  # a tab's process until the tab closes (the console's stop signal)


@asynccontextmanager
async def opened(**options: Any) -> AsyncIterator[Client]:
    """A server, and a client that opened its page with the token: it holds the cookie."""
    async with client_of(a_server(STAYS, **options)) as client:
        assert (await client.get(f"/?token={TOKEN}")).status == 200
        assert len(client.session.cookie_jar) == 1
        yield client


def port_of(client: Client) -> int:
    assert client.port is not None  # listening
    return client.port


async def socket_status(client: Client, **headers: str) -> int:
    """The status the page's WebSocket is answered with: 101 when it is let in."""
    try:
        async with client.ws_connect("/ws", headers=headers):
            return 101
    except aiohttp.WSServerHandshakeError as refused:
        return refused.status


async def test_a_foreign_origin_is_refused() -> None:
    async with opened() as client:
        for origin in ("http://evil.example", f"http://evil.example:{client.port}"):
            assert await socket_status(client, Origin=origin) == 403, origin


async def test_origin_null_is_refused() -> None:
    """A sandboxed frame, a `data:` or `file:` page: no site a page of ours has."""
    async with opened() as client:
        assert await socket_status(client, Origin="null") == 403


async def test_a_page_on_another_loopback_port_is_refused_and_its_own_let_in() -> None:
    """The same site for the browser, with this server's cookie: another server's page."""
    async with opened() as client:
        port, other = port_of(client), port_of(client) + 1
        assert await socket_status(client, Origin=f"http://127.0.0.1:{port}") == 101
        assert await socket_status(client, Origin=f"http://localhost:{port}") == 101
        assert await socket_status(client, Host=f"localhost:{port}") == 101
        assert await socket_status(client) == 101  # no Origin: no browser's page, the token
        for origin in (
            f"http://127.0.0.1:{other}",
            f"http://localhost:{other}",
            "http://127.0.0.1",
            f"https://127.0.0.1:{other}",
        ):
            assert await socket_status(client, Origin=origin) == 403, origin


async def test_a_forged_host_is_refused() -> None:
    """DNS rebinding: a name of the attacker's resolved to 127.0.0.1 is sent as the Host (and
    its page's Origin is the same name); another port's Host is no request for us."""
    async with opened() as client:
        port = port_of(client)
        for host in (
            f"evil.example:{port}",
            f"localhost.evil.example:{port}",
            f"127.0.0.1:{port + 1}",
            "127.0.0.1",
            'x"><b',
        ):
            assert await socket_status(client, Host=host) == 403, host
        assert await socket_status(
            client, Host=f"evil.example:{port}", Origin=f"http://evil.example:{port}"
        ) == 403  # fmt: skip


async def test_another_servers_cookie_is_refused() -> None:
    """Two servers of the same token: the cookie one set opens nothing on the other, under
    its own name or under the other's."""
    async with opened() as first, opened() as second:
        [theirs] = first.session.cookie_jar
        second.session.cookie_jar.clear()
        own_name = serve_auth.cookie_name(second.port)
        second.session.cookie_jar.update_cookies({theirs.key: theirs.value})
        assert await socket_status(second) == 403
        second.session.cookie_jar.update_cookies({own_name: theirs.value})
        assert await socket_status(second) == 403
        assert (await second.get("/")).status == 403


async def test_a_server_started_again_on_the_port_takes_no_earlier_cookie() -> None:
    """The same port, the token given the same: the earlier server's cookie opens nothing."""
    async with opened() as earlier:
        port = earlier.port
        [cookie] = earlier.session.cookie_jar
    async with client_of(a_server(STAYS), port=port) as again:
        again.session.cookie_jar.update_cookies({cookie.key: cookie.value})
        assert await socket_status(again) == 403
        assert (await again.get("/")).status == 403


async def test_every_request_is_checked_not_only_the_socket() -> None:
    async with opened() as client:
        for path in (f"/?token={TOKEN}", "/", "/static/js/textual.js"):
            foreign = await client.get(path, headers={"Origin": "http://evil.example"})
            assert foreign.status == 403, path
            assert "Set-Cookie" not in foreign.headers
            forged = await client.get(path, headers={"Host": f"evil.example:{client.port}"})
            assert forged.status == 403, path
        assert (await client.get("/static/js/textual.js")).status == 200


async def test_a_refusal_is_logged_without_the_token(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="loopdeck.serve")
    async with opened() as client:
        refused = await client.get(f"/?token={TOKEN}", headers={"Origin": "null"})
        assert refused.status == 403
    [record] = [r for r in caplog.records if r.name == "loopdeck.serve"]
    assert "refused GET '/'" in record.getMessage()
    assert "Origin 'null'" in record.getMessage()
    assert TOKEN not in caplog.text


@pytest.mark.parametrize(
    ("given", "taken"),
    [
        ("console.example", ("console.example", None)),
        ("Console.Example:9000", ("console.example", 9000)),
        ("192.168.1.20", ("192.168.1.20", None)),
        ("[::1]:8765", ("::1", 8765)),
    ],
)
def test_allow_host_takes_a_name_and_a_port(given: str, taken: serve.Authority) -> None:
    assert parsed("--allow-host", given, "--allow-host", "b.example").allow_host == [
        taken, ("b.example", None)
    ]  # fmt: skip


@pytest.mark.parametrize("given", ["*.example", "a b", "x:0", "x:99999", "::1", "[zz]", "a/b"])
def test_allow_host_refuses_what_is_no_host(given: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        parsed("--allow-host", given)
    assert exit_.value.code == 2
    assert "argument --allow-host: must be NAME or NAME:PORT" in capsys.readouterr().err


async def test_an_allowed_name_is_served_at_its_port() -> None:
    """A name on the server's port; with a port, a tunnel's or proxy's, and no other."""
    allowed = (("console.example", None), ("tunnel.example", 9000))
    async with opened(allowed=allowed) as client:
        port = port_of(client)
        assert await socket_status(
            client, Host=f"console.example:{port}", Origin=f"http://console.example:{port}"
        ) == 101  # fmt: skip
        assert await socket_status(
            client, Host="tunnel.example:9000", Origin="http://tunnel.example:9000"
        ) == 101  # fmt: skip
        assert await socket_status(client, Host=f"console.example:{port + 1}") == 403
        assert await socket_status(client, Host=f"tunnel.example:{port}") == 403
        assert await socket_status(client, Origin="http://tunnel.example:9001") == 403


async def test_a_real_server_lets_its_own_page_in_and_says_what_it_refused() -> None:
    """`loopdeck serve` itself: its page's socket gets the console's first frame; a page of
    another origin, with the cookie, gets 403, said on stderr without the token."""
    served = start_server()
    token = served.url.split("token=")[1]
    socket_url = served.base.replace("http://", "ws://") + "/ws?width=100&height=30"
    try:
        async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as session:
            assert (await session.get(served.url)).status == 200
            with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
                await session.ws_connect(socket_url, origin="http://evil.example")
            assert refused.value.status == 403
            async with session.ws_connect(socket_url, origin=served.base) as websocket:
                message = await asyncio.wait_for(websocket.receive(), 30)
                assert message.type is aiohttp.WSMsgType.BINARY
                consoles = served.consoles()
        assert gone(consoles, 10)
    finally:
        assert await asyncio.to_thread(served.stop, signal.SIGTERM) == 0
    err = served.process.stderr.read() if served.process.stderr else ""
    assert "refused GET '/ws': Origin 'http://evil.example' is not this server's" in err
    assert token not in err
