"""`loopdeck serve`: its options, its refusals, the token every request needs, and a server
whose consoles end with it. The console in a real browser is `test_serve_browser.py`'s."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hmac
import os
import queue
import re
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
import tomllib
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO, Any

import aiohttp
import pytest
from aiohttp.test_utils import TestClient, TestServer

from loopdeck.cli import runs, serve, serve_auth
from loopdeck.cli.spare_console import SPARE_NAME, TAB_NAME
from loopdeck.stop_signals import descendants

TOKEN = "right-token"

# The CLI's `serve` through add_serve_command and run_serve, as cli/__init__.py routes it.
SERVE = """\
import argparse, sys
from loopdeck.cli.serve import add_serve_command, run_serve
parser = argparse.ArgumentParser(prog="loopdeck")
add_serve_command(parser.add_subparsers(dest="command", required=True))
sys.exit(run_serve(parser.parse_args(sys.argv[1:])))
"""


def parsed(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="loopdeck")
    serve.add_serve_command(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(["serve", *argv])


def test_the_options_and_their_defaults() -> None:
    args = parsed()
    assert (args.command, args.db, args.host, args.port, args.public, args.allow_host) == (
        "serve", None, "127.0.0.1", 8765, False, []
    )  # fmt: skip
    args = parsed("--db", "~/x.db", "--host", "0.0.0.0", "--port", "9000", "--public")
    assert (args.db, args.host, args.port, args.public) == (
        Path("~/x.db").expanduser(), "0.0.0.0", 9000, True
    )  # fmt: skip
    assert parsed("--db", "postgresql://me@pg/runs").db == "postgresql://me@pg/runs"


@pytest.mark.parametrize("port", ["http", "-1", "65536"])
def test_a_port_out_of_range_is_refused_by_the_parser(
    port: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        parsed("--port", port)
    assert exit_.value.code == 2
    assert "--port" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True), ("127.0.0.2", True), ("localhost", True), ("LOCALHOST", True),
        ("::1", True), ("[::1]", True), ("0.0.0.0", False), ("::", False),
        ("192.168.1.20", False), ("example.com", False), ("localhost.example.com", False),
    ],
)  # fmt: skip
def test_only_loopback_is_taken_as_loopback(host: str, loopback: bool) -> None:
    assert serve.is_loopback(host) is loopback


def test_another_host_without_public_is_refused_naming_the_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "runs.db"
    args = parsed("--host", "0.0.0.0", "--db", str(db))
    assert serve.run_serve(args) == 2
    err = capsys.readouterr().err
    assert "--host 0.0.0.0" in err and "add --public" in err
    assert not db.exists()  # refused before the store is touched
    assert serve.refusal("0.0.0.0", public=True) is None


def test_a_port_taken_is_said_with_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        args = parsed("--db", str(tmp_path / "runs.db"), "--port", str(port))
        assert serve.run_serve(args) == 2
    assert f"cannot listen on --host 127.0.0.1 --port {port}" in capsys.readouterr().err


def test_a_store_serve_makes_is_said(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """In `made_store`'s words, as `loopdeck console` and `loopdeck run` say it."""
    db = tmp_path / "new" / "runs.db"
    made = "loopdeck serve: no store was at"
    with socket.socket() as taken:  # stops it at the port, its store opened
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        args = parsed("--db", str(db), "--port", str(taken.getsockname()[1]))
        assert serve.run_serve(args) == 2
        said = capsys.readouterr().err
        assert f"{made} {db}: made a new, empty one (its folder too)" in said
        assert serve.run_serve(args) == 2
        assert made not in capsys.readouterr().err  # there now: nothing to say


def test_the_console_command_quotes_the_store_and_execs_the_console(tmp_path: Path) -> None:
    db = tmp_path / "it's a; $(store)" / "runs.db"
    command, extra = serve.console_command(db)
    assert shlex.split(command) == [
        "exec", sys.executable, "-m", "loopdeck.cli.spare_console", "console", "--db", str(db)
    ]  # fmt: skip
    assert extra == {}


def test_a_postgres_password_goes_to_the_environment_not_the_command_line() -> None:
    command, extra = serve.console_command("postgresql://me:s%40cret@pg:5432/runs")
    assert "s%40cret" not in command and "s@cret" not in command
    assert shlex.split(command)[-1] == "postgresql://me@pg:5432/runs"
    assert extra == {"PGPASSWORD": "s@cret"}
    command, extra = serve.console_command("postgresql://me@pg/runs?password=pw&sslmode=off")
    assert "pw" not in command and extra == {"PGPASSWORD": "pw"}


def test_the_console_opens_under_the_web_driver_and_nowhere_else_without_a_terminal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(sys, "stdin", open(os.devnull))  # noqa: SIM115 (closed by pytest)
    monkeypatch.delenv("TEXTUAL_DRIVER", raising=False)
    assert "needs a terminal" in (runs.no_terminal("console") or "")
    monkeypatch.setenv("TEXTUAL_DRIVER", "textual.drivers.headless_driver:HeadlessDriver")
    assert runs.no_terminal("console") is not None
    monkeypatch.setenv("TEXTUAL_DRIVER", "textual.drivers.web_driver:WebDriver")
    assert runs.no_terminal("console") is None


@asynccontextmanager
async def client_of(
    server: serve_auth.ConsoleServer, port: int | None = None
) -> AsyncIterator[TestClient[Any, Any]]:
    """A client of `server` listening on loopback (on `port`, else a free one), as
    `serve_until_stopped` has it: its `port` the one bound."""
    listening = TestServer(await server._make_app(), host="127.0.0.1", port=port)
    async with TestClient(listening) as client:
        server.port = client.port
        yield client


def a_server(
    command: str = "exit 1", allowed: tuple[serve.Authority, ...] = ()
) -> serve_auth.ConsoleServer:
    site = serve.Site("127.0.0.1", allowed)
    return serve_auth.ConsoleServer(
        command, host="127.0.0.1", port=0, token=TOKEN, console_env={}, site=site.refusal
    )


async def test_no_token_or_a_wrong_one_is_refused() -> None:
    async with client_of(a_server()) as client:
        for path in ("/", "/?token=wrong", "/?token=", "/static/js/textual.js", "/ws"):
            response = await client.get(path)
            assert response.status == 403, path
            assert "token" in await response.text()
            assert "Set-Cookie" not in response.headers
        client.session.cookie_jar.update_cookies({serve_auth.cookie_name(client.port): "wrong"})
        assert (await client.get("/")).status == 403


async def test_the_right_query_token_opens_the_page_and_sets_a_strict_cookie() -> None:
    async with client_of(server := a_server()) as client:
        response = await client.get(f"/?token={TOKEN}")
        assert response.status == 200
        assert 'data-session-websocket-url="ws://' in await response.text()
        cookie = response.cookies[f"loopdeck_{client.port}"]
        assert (cookie.key, cookie.value) == server.cookie()
        assert TOKEN not in cookie.value  # derived from it, under this server's secret
        assert cookie["httponly"] is True
        assert cookie["samesite"] == "Strict"
        assert cookie["path"] == "/"
        # Then the page's own requests pass by the cookie alone.
        assert (await client.get("/static/js/textual.js")).status == 200
        assert (await client.get("/?fontsize=20")).status == 200


async def test_each_server_has_its_own_cookie() -> None:
    """Browsers send a host's cookies to every port: another server's cookie is not ours."""
    async with client_of(server := a_server()) as client:
        another = serve_auth.cookie_name(server.port + 1)
        client.session.cookie_jar.update_cookies({another: TOKEN})
        assert (await client.get("/")).status == 403


async def test_the_token_is_compared_in_constant_time(monkeypatch: pytest.MonkeyPatch) -> None:
    compared: list[tuple[object, object]] = []
    real = hmac.compare_digest

    def spy(a: bytes, b: bytes) -> bool:
        compared.append((a, b))
        return real(a, b)

    monkeypatch.setattr(serve_auth.hmac, "compare_digest", spy)
    async with client_of(a_server()) as client:
        assert (await client.get("/?token=nope")).status == 403
        assert (await client.get(f"/?token={TOKEN}")).status == 200
    assert (b"nope", TOKEN.encode()) in compared
    assert (TOKEN.encode(), TOKEN.encode()) in compared
    assert not serve_auth.token_matches("\udcff", TOKEN)  # no text refused by an exception


async def test_the_page_is_addressed_as_the_browser_reached_it() -> None:
    """A server on 0.0.0.0 is reached as `host:port`: the page's socket goes there."""
    async with client_of(a_server(allowed=(("console.example", None),))) as client:
        at = f"console.example:{client.port}"
        page = await (await client.get(f"/?token={TOKEN}", headers={"Host": at})).text()
        assert f'data-session-websocket-url="ws://{at}/ws"' in page
        assert f"http://{at}/static/js/textual.js" in page
        assert f"http://{at}/fonts/loopdeck-symbols.woff2" in page
        odd = await client.get(f"/?token={TOKEN}", headers={"Host": 'x"><b'})
        assert odd.status == 403  # never written into the page


async def test_the_page_asks_this_server_alone_for_what_it_loads() -> None:
    """Its fonts too (no font host: the page works offline, and tells no one it opened),
    each behind the token like the rest."""
    async with client_of(a_server()) as client:
        assert (await client.get("/fonts/loopdeck-symbols.woff2")).status == 403
        page = await (await client.get(f"/?token={TOKEN}")).text()
        assert (await client.get("/fonts/app_index.html")).status == 404  # a font, or nothing
        assert (await client.get("/fonts/__init__.py")).status == 404
        loaded = set(re.findall(r'(?:href=|src=|url\()"([^"]+)"', page))
        base = f"http://127.0.0.1:{client.port}/"
        assert {url for url in loaded if not url.startswith(base)} == set()
        fonts = {url for url in loaded if url.endswith((".woff2", ".ttf"))}
        assert len(fonts) >= 4  # Roboto Mono and its italic, the two symbol fonts
        for url in loaded:
            response = await client.get("/" + url.removeprefix(base))
            assert response.status == 200, url


def test_the_wheel_carries_the_page_and_its_fonts() -> None:
    """An installed console without them would answer the page with an error."""
    root = Path(__file__).resolve().parents[1]
    setuptools = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert "loopdeck.cli.serve_page" in setuptools["packages"]
    globs = setuptools["package-data"]["loopdeck.cli.serve_page"]
    shipped = [path.name for path in serve_auth.PAGE.iterdir() if path.is_file()]
    assert {"app_index.html", "symbols.css", "loopdeck-symbols.woff2"} <= set(shipped)
    for name in shipped:
        if name != "__init__.py" and not name.endswith(".pyc"):
            assert any(PurePosixPath(name).match(glob) for glob in globs), name


@dataclass
class Served:
    """A `loopdeck serve` in a process of its own, listening."""

    process: subprocess.Popen[str]
    url: str  # to open, with its token
    base: str  # scheme, host and port

    def consoles(self) -> list[int]:
        """Its tabs' console processes (each in a session of its own, still its child)."""
        return [pid for pid in self.all_consoles() if _named(pid) == TAB_NAME]

    def spares(self) -> list[int]:
        """The console it keeps started for the next tab, once that one named itself."""
        return [pid for pid in self.all_consoles() if _named(pid) == SPARE_NAME]

    def all_consoles(self) -> list[int]:
        """Its tabs' consoles and the spare, however far they started."""
        return [pid for pid in descendants(self.process.pid) if _is_console(pid)]

    def stop(self, sig: signal.Signals = signal.SIGTERM, timeout: float = 30) -> int:
        self.process.send_signal(sig)
        return self.process.wait(timeout)


def _is_console(pid: int) -> bool:
    try:
        return b"console" in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False


def _named(pid: int) -> bytes:
    """Its thread's name (`comm`), which a spare console sets."""
    try:
        return Path(f"/proc/{pid}/comm").read_bytes().strip()
    except OSError:
        return b""


def until(check: Callable[[], bool], timeout: float, what: str) -> None:
    end = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < end, what
        time.sleep(0.05)


@pytest.fixture
def served() -> Iterator[Served]:
    """`loopdeck serve --port 0` on the test's own store (LOOPDECK_DB)."""
    server = start_server()
    yield server
    if server.process.poll() is None:
        server.process.kill()
        server.process.wait()


def start_server(*argv: str, timeout: float = 30) -> Served:
    process = subprocess.Popen(
        [sys.executable, "-c", SERVE, "serve", "--port", "0", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=_read_lines, args=(process.stdout, lines), daemon=True).start()
    said = ""
    end = time.monotonic() + timeout
    while time.monotonic() < end and process.poll() is None:
        with contextlib.suppress(queue.Empty):
            line = lines.get(timeout=0.1)
            said += line
            if line.startswith("open http://"):
                url = line.split()[1]
                return Served(process, url, url.split("/?token=")[0])
    process.kill()
    _, err = process.communicate()
    raise AssertionError(f"the server never said its URL: {said}{err}")


def _read_lines(stream: IO[str], lines: queue.Queue[str]) -> None:
    for line in stream:
        lines.put(line)


def gone(pids: list[int], timeout: float) -> bool:
    """Whether the consoles `pids` ended within `timeout`; those left are killed, so a
    failing test leaves none behind."""
    end = time.monotonic() + timeout
    while left := [pid for pid in pids if _is_console(pid)]:
        if time.monotonic() >= end:
            for pid in left:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            return False
        time.sleep(0.05)
    return True


@asynccontextmanager
async def tab(served: Served) -> AsyncIterator[aiohttp.ClientWebSocketResponse]:
    """What a browser tab does: the page with the token, then its socket by the cookie; in
    once the console drew its first frame."""
    jar = aiohttp.CookieJar(unsafe=True)  # a cookie for an IP address host
    async with aiohttp.ClientSession(cookie_jar=jar) as session:
        assert (await session.get(served.url)).status == 200
        socket_url = served.base.replace("http://", "ws://") + "/ws?width=100&height=30"
        async with session.ws_connect(socket_url) as websocket:
            message = await asyncio.wait_for(websocket.receive(), 30)
            assert message.type is aiohttp.WSMsgType.BINARY
            yield websocket


def listening_on(port: int) -> list[str]:
    """The local addresses listening on `port`, from /proc (IPv4, as hex: 0100007F)."""
    rows = Path("/proc/net/tcp").read_text().splitlines()[1:]
    fields = [row.split() for row in rows]
    return [
        f[1].split(":")[0] for f in fields if f[3] == "0A" and int(f[1].split(":")[1], 16) == port
    ]


def test_served_on_loopback_with_the_token(served: Served) -> None:
    assert served.url.startswith("http://127.0.0.1:")
    assert listening_on(int(served.base.rsplit(":", 1)[1])) == ["0100007F"]  # 127.0.0.1 only
    assert _status(served.base + "/") == 403
    assert _status(served.url) == 200
    assert served.stop(signal.SIGINT) == 0


def _status(url: str) -> int:
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        return error.code


@pytest.mark.slow  # two consoles started and ended with the server: seconds
async def test_each_tab_is_a_console_that_ends_with_the_server(served: Served) -> None:
    async with tab(served), tab(served):
        assert len(served.consoles()) == 2
        everyone = served.all_consoles()  # the spare too
        assert await asyncio.to_thread(served.stop) == 0
        assert gone(everyone, 5), "a console outlived the server"


async def test_a_tab_takes_the_console_started_before_it(served: Served) -> None:
    """The server keeps a console started for the next tab; a tab takes it, and the next
    one starts after it."""
    await asyncio.to_thread(until, lambda: len(served.spares()) == 1, 30, "no spare started")
    [spare] = served.spares()
    async with tab(served):
        assert served.consoles() == [spare]
        await asyncio.to_thread(
            until, lambda: len(served.spares()) == 1, 30, "no next spare started"
        )
        assert served.spares() != [spare]
    assert gone([spare], 10), "the closed tab's console kept running"
    assert served.stop() == 0


def test_the_serve_command_is_light_to_import() -> None:
    """The parser imports `cli/serve.py` for `add_serve_command`: `loopdeck run`'s first
    frame must not wait for aiohttp, textual-serve, or the models."""
    from test_core_isolation import loaded

    watched = ("aiohttp", "textual_serve", "jinja2", "pydantic", "loopdeck.operator", "textual")
    assert loaded("loopdeck.cli.serve", watched) == []
