"""The web side of `loopdeck serve`: textual-serve's server answering only its own page, with
the token asked of every request, and each tab's console a process that ends with the server.

Its own page: every request's `Host`, and its `Origin` when it has one, name this server at
its port: a loopback name, the address it listens on (or the one the connection came to), or
an `--allow-host` name. A browser counts every port of 127.0.0.1 as one site (SameSite does
not stop a page on another local port) and a page of a name rebound to 127.0.0.1 (DNS
rebinding) sends its own name as Host. Anything else is answered 403 and logged, without the
query (which may hold the token).

The token: right in the `token` query parameter, or in this server's cookie (HttpOnly,
SameSite=Strict: set by the first right query, then sent by the page's WebSocket and static
requests). Browsers send a host's cookies to each of its ports, so the cookie is named by the
port and holds an HMAC of the token under a secret of this server's own: another local
server's cookie opens nothing here. Anything else is answered 403. Compared in constant time.

A console: a process of its own (`loopdeck console`), in a session of its own so a terminal's
Ctrl-C reaches the server alone, which then stops each console by SIGTERM, its stop signal (its
live runs killed and recorded), SIGKILL after `CONSOLE_GRACE_S`; it gets SIGTERM too if the
server dies (PR_SET_PDEATHSIG). A closed tab stops its console the same way.

Imported only by `run_serve`: aiohttp and textual-serve stay out of the CLI's import.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import hashlib
import hmac
import json
import logging
import os
import re
import secrets
import signal
import sys
from collections.abc import Callable, Sequence
from typing import Any

import aiohttp_jinja2
from aiohttp import WSCloseCode, web
from aiohttp.typedefs import Handler
from textual_serve.app_service import AppService
from textual_serve.server import Server, to_int

from loopdeck.stop_signals import StopSignals

TOKEN_PARAM = "token"
CONSOLE_GRACE_S = 10.0  # a console's own stop (its runs killed, recorded) before SIGKILL
FORBIDDEN = "loopdeck serve: open the URL printed when the server started (it has the token)\n"
NOT_OURS = "loopdeck serve: this console answers only its own page\n"
log = logging.getLogger("loopdeck.serve")
# A Host header fit to be written back into the page (name or address, and a port).
PLAIN_HOST = re.compile(r"[A-Za-z0-9.\-]+(:\d+)?|\[[0-9A-Fa-f:.]+\](:\d+)?")

PR_SET_PDEATHSIG = 1
# Loaded in the server: the forked child only calls it (no loader lock taken after fork).
_PRCTL = ctypes.CDLL(None, use_errno=True).prctl if sys.platform.startswith("linux") else None


def cookie_name(port: int) -> str:
    """Browsers keep cookies per host, not per port: each server's has its port in its name."""
    return f"loopdeck_{port}"


def token_matches(given: str | None, token: str) -> bool:
    if given is None:
        return False
    return hmac.compare_digest(given.encode("utf-8", "surrogatepass"), token.encode())


def token_middleware(token: str, cookie: Callable[[], tuple[str, str]]) -> Any:
    """Lets a request through with the right token in the query (which sets the cookie), or
    the cookie's name and value `cookie()` gives; any other gets 403."""

    @web.middleware
    async def check_token(request: web.Request, handler: Handler) -> web.StreamResponse:
        name, value = cookie()
        if token_matches(request.cookies.get(name), value):
            return await handler(request)
        if not token_matches(request.query.get(TOKEN_PARAM), token):
            return web.Response(status=403, text=FORBIDDEN)
        response = await handler(request)
        if not response.prepared:  # a WebSocket's or a stream's headers are gone already
            response.set_cookie(name, value, httponly=True, samesite="Strict", path="/")
        return response

    return check_token


def site_middleware(refusal: Callable[[web.Request], str | None]) -> Any:
    """Answers 403 to a request `refusal` names a reason for, and logs it (the path alone:
    the query may hold the token)."""

    @web.middleware
    async def check_site(request: web.Request, handler: Handler) -> web.StreamResponse:
        if (why := refusal(request)) is None:
            return await handler(request)
        log.warning("loopdeck serve: refused %s %r: %s", request.method, request.path, why)
        return web.Response(status=403, text=NOT_OURS)

    return check_site


def local_address(request: web.Request) -> str | None:
    """The address the request's connection came to (of a server on 0.0.0.0, the one the
    browser used)."""
    transport = request.transport
    sockname = transport.get_extra_info("sockname") if transport is not None else None
    return str(sockname[0]) if isinstance(sockname, tuple) and sockname else None


# `serve.Site.refusal`: why a request to the port, with these Host and Origin headers, on a
# connection to that address, is not from the server's own page; or None.
SiteRefusal = Callable[[int, Sequence[str], Sequence[str], str | None], str | None]


class ConsoleService(AppService):
    """One tab's console process, stopped by its own stop signal."""

    def __init__(self, command: str, *, extra_env: dict[str, str], **kwargs: Any) -> None:
        super().__init__(command, **kwargs)
        self.extra_env = extra_env
        self.exiting = False  # it said it leaves (`q`): let it finish before any signal
        self._ending: asyncio.Task[None] | None = None

    def _build_environment(self, width: int = 80, height: int = 24) -> dict[str, str]:
        return {**super()._build_environment(width=width, height=height), **self.extra_env}

    async def _open_app_process(
        self, width: int = 80, height: int = 24
    ) -> asyncio.subprocess.Process:
        server = os.getpid()
        self._process = process = await asyncio.create_subprocess_shell(
            self.command,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=self._build_environment(width=width, height=height),
            start_new_session=True,
            preexec_fn=lambda: _die_with(server),
        )
        assert process.stdin is not None
        self._stdin = process.stdin
        return process

    async def on_meta(self, data: bytes) -> None:
        if json.loads(data).get("type") == "exit":
            self.exiting = True
        await super().on_meta(data)

    async def stop(self) -> None:
        """Its stop signal, then SIGKILL to its group after `CONSOLE_GRACE_S`. Called by the
        tab's handler and by the server's shutdown alike: one ending, awaited by both."""
        if self._task is None:
            return
        if self._ending is None:
            self._ending = asyncio.create_task(self._end())
        await asyncio.shield(self._ending)

    async def _end(self) -> None:
        await self._download_manager.cancel_app_downloads(app_service_id=self.app_service_id)
        process = self._process
        assert process is not None and self._task is not None
        if not self.exiting:
            self.send(signal.SIGTERM)
        try:
            async with asyncio.timeout(CONSOLE_GRACE_S):
                await process.wait()
        except TimeoutError:
            self.hurry()
        try:  # its output read to the end (a child still holding it was in its group)
            async with asyncio.timeout(CONSOLE_GRACE_S):
                await self._task
        except TimeoutError:
            self._task.cancel()

    def send(self, sig: signal.Signals) -> None:
        if self._process is not None and self._process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self._process.pid, sig)

    def hurry(self) -> None:
        """SIGKILL to the console and whatever of its group is left."""
        if self._process is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self._process.pid, signal.SIGKILL)


def _die_with(server: int) -> None:
    """In the forked console, before exec: SIGTERM when the server dies."""
    if _PRCTL is not None:
        _PRCTL(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if os.getppid() != server:  # the server died before that took hold
        os._exit(1)


class ConsoleServer(Server):
    """textual-serve's server: only its own page answered, the token asked of every request,
    the page's addresses taken from the request (a server on 0.0.0.0 is reached by another
    name), each tab's console ended with the server. `port` is the bound one once listening."""

    def __init__(
        self,
        command: str,
        *,
        host: str,
        port: int,
        token: str,
        console_env: dict[str, str],
        site: SiteRefusal,
    ) -> None:
        super().__init__(command, host=host, port=port, title="loopdeck")
        self.token = token
        self.console_env = console_env
        self.site = site
        self.secret = secrets.token_bytes(32)  # this server's own: its cookie is no other's
        self.consoles: dict[ConsoleService, web.WebSocketResponse] = {}
        self.stopping = False

    async def _make_app(self) -> web.Application:
        app = await super()._make_app()
        app.middlewares.append(site_middleware(self.refusal))
        app.middlewares.append(token_middleware(self.token, self.cookie))
        app.on_shutdown.append(self._end_consoles)
        return app

    def cookie(self) -> tuple[str, str]:
        """This server's cookie: named by its port, an HMAC of the token under its secret."""
        value = hmac.new(self.secret, f"{self.port}:{self.token}".encode(), hashlib.sha256)
        return cookie_name(self.port), value.hexdigest()

    def refusal(self, request: web.Request) -> str | None:
        """Why `request` is not from this server's own page, or None."""
        hosts, origins = request.headers.getall("Host", []), request.headers.getall("Origin", [])
        return self.site(self.port, hosts, origins, local_address(request))

    async def on_startup(self, app: web.Application) -> None:
        """Said by `run_serve` once the port is bound, not by textual-serve's banner."""

    async def handle_index(self, request: web.Request) -> web.StreamResponse:
        host = request.host if PLAIN_HOST.fullmatch(request.host) else f"{self.host}:{self.port}"
        socket_scheme = "wss" if request.scheme == "https" else "ws"
        context = {
            "font_size": to_int(request.query.get("fontsize", "16"), 16),
            "app_websocket_url": f"{socket_scheme}://{host}/ws",
            "config": {"static": {"url": f"{request.scheme}://{host}/static/"}},
            "application": {"name": self.title},
        }
        return aiohttp_jinja2.render_template("app_index.html", request, context)

    async def handle_websocket(self, request: web.Request) -> web.WebSocketResponse:
        if self.stopping:
            raise web.HTTPServiceUnavailable(text="loopdeck serve is stopping\n")
        websocket = web.WebSocketResponse(heartbeat=15)
        await websocket.prepare(request)
        console = ConsoleService(
            self.command,
            extra_env=self.console_env,
            write_bytes=websocket.send_bytes,
            write_str=websocket.send_str,
            close=websocket.close,
            download_manager=self.download_manager,
        )
        self.consoles[console] = websocket
        try:
            width = to_int(request.query.get("width", "80"), 80)
            await console.start(width, to_int(request.query.get("height", "24"), 24))
            await self._process_messages(websocket, console)
        finally:
            await console.stop()
            self.consoles.pop(console, None)
        return websocket

    async def _end_consoles(self, app: web.Application) -> None:
        self.stopping = True
        ending = list(self.consoles.items())
        await asyncio.gather(*(console.stop() for console, _ in ending))
        for _, websocket in ending:
            await websocket.close(code=WSCloseCode.GOING_AWAY, message=b"loopdeck serve stopped")

    def hurry(self) -> None:
        for console in list(self.consoles):
            console.hurry()


class CannotListen(Exception):
    """The host and port cannot be listened on (taken, not this machine's address)."""


async def serve_until_stopped(server: ConsoleServer, announce: Callable[[int], None]) -> None:
    """Serves until a stop signal; the consoles are stopped before the server ends, and a
    second signal kills those still recording their stop."""
    runner = web.AppRunner(
        await server._make_app(),
        handle_signals=False,
        access_log=None,  # a request's line would hold the token
        shutdown_timeout=CONSOLE_GRACE_S,
    )
    await runner.setup()
    signals = StopSignals()
    signals.install()  # a signal while binding is kept, and delivered once aimed
    try:
        try:
            await web.TCPSite(runner, server.host, server.port).start()
        except OSError as exc:
            raise CannotListen(
                f"cannot listen on --host {server.host} --port {server.port}: {exc.strerror or exc}"
            ) from None
        server.port = runner.addresses[0][1]
        stopped = asyncio.Event()
        signals.aim(lambda by: stopped.set(), lambda by: server.hurry())
        announce(server.port)
        await stopped.wait()
    finally:
        await runner.cleanup()
        signals.remove()
