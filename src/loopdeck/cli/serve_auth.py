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

Its page (`serve_page/app_index.html`, textual-serve's own template hook): textual-serve's
page with its fonts served here, the symbols Roboto Mono lacks among them (`serve_page`'s
woff2 files, at `/fonts/`), the terminal started once they are loaded and given the keys as
soon as its socket is open.

Each tab's console: a process of its own, one kept started ahead of the next tab
(`serve_consoles`), all of them ended with the server.

Imported only by `run_serve`: aiohttp and textual-serve stay out of the CLI's import.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import importlib.resources
import logging
import re
import secrets
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import aiohttp_jinja2
from aiohttp import WSCloseCode, web
from aiohttp.typedefs import Handler
from textual_serve.server import Server, to_int

from loopdeck.cli.serve_consoles import CONSOLE_GRACE_S, ConsoleService, Spare
from loopdeck.stop_signals import StopSignals

# The page and its fonts: a resource package, a folder on disk as installed.
PAGE = Path(str(importlib.resources.files("loopdeck.cli.serve_page")))
FONTS_ROUTE = "/fonts/"
TOKEN_PARAM = "token"
FORBIDDEN = "loopdeck serve: open the URL printed when the server started (it has the token)\n"
NOT_OURS = "loopdeck serve: this console answers only its own page\n"
log = logging.getLogger("loopdeck.serve")
# A Host header fit to be written back into the page (name or address, and a port).
PLAIN_HOST = re.compile(r"[A-Za-z0-9.\-]+(:\d+)?|\[[0-9A-Fa-f:.]+\](:\d+)?")


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


class ConsoleServer(Server):
    """textual-serve's server: only its own page answered, the token asked of every request,
    the page's addresses taken from the request (a server on 0.0.0.0 is reached by another
    name), a console kept started for the next tab, each ended with the server. `port` is the
    bound one once listening."""

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
        super().__init__(command, host=host, port=port, title="loopdeck", templates_path=PAGE)
        self.token = token
        self.console_env = console_env
        self.site = site
        self.secret = secrets.token_bytes(32)  # this server's own: its cookie is no other's
        self.consoles: dict[ConsoleService, web.WebSocketResponse] = {}
        self.spare = Spare(self._console)
        self.stopping = False

    def _console(self) -> ConsoleService:
        return ConsoleService(
            self.command, extra_env=self.console_env, download_manager=self.download_manager
        )

    async def _make_app(self) -> web.Application:
        app = await super()._make_app()
        app.router.add_get(FONTS_ROUTE + "{name}", self.handle_font, name="font")
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
        """The first spare console started. Said by `run_serve` once the port is bound, not by
        textual-serve's banner."""
        self.spare.start_soon()

    async def handle_index(self, request: web.Request) -> web.StreamResponse:
        host = request.host if PLAIN_HOST.fullmatch(request.host) else f"{self.host}:{self.port}"
        socket_scheme = "wss" if request.scheme == "https" else "ws"
        context = {
            "font_size": to_int(request.query.get("fontsize", "16"), 16),
            "app_websocket_url": f"{socket_scheme}://{host}/ws",
            "config": {"static": {"url": f"{request.scheme}://{host}/static/"}},
            "fonts_url": f"{request.scheme}://{host}{FONTS_ROUTE}",
            "application": {"name": self.title},
        }
        return aiohttp_jinja2.render_template("app_index.html", request, context)

    async def handle_font(self, request: web.Request) -> web.StreamResponse:
        """One of the page's symbol fonts; nothing else of the page's folder."""
        name = request.match_info["name"]
        if not name.endswith(".woff2") or name not in {p.name for p in PAGE.glob("*.woff2")}:
            raise web.HTTPNotFound(text=f"loopdeck serve: no font {name!r}\n")
        return web.FileResponse(PAGE / name)

    async def handle_websocket(self, request: web.Request) -> web.WebSocketResponse:
        if self.stopping:
            raise web.HTTPServiceUnavailable(text="loopdeck serve is stopping\n")
        websocket = web.WebSocketResponse(heartbeat=15)
        await websocket.prepare(request)
        console = await self.spare.take()
        console.attach(websocket)
        self.consoles[console] = websocket
        try:
            width = to_int(request.query.get("width", "80"), 80)
            await console.start(width, to_int(request.query.get("height", "24"), 24))
            await until_either(self._process_messages(websocket, console), console.done.wait())
            await websocket.close()  # the tab closed it, or the console is done
        finally:  # its own end (`q`) takes no signal; its output's end may be the tab's
            await console.stop(tab_closed=not self.stopping)
            self.consoles.pop(console, None)
        return websocket

    async def _end_consoles(self, app: web.Application) -> None:
        self.stopping = True
        ending = list(self.consoles.items())
        await asyncio.gather(self.spare.stop(), *(console.stop() for console, _ in ending))
        for _, websocket in ending:
            await websocket.close(code=WSCloseCode.GOING_AWAY, message=b"loopdeck serve stopped")

    def hurry(self) -> None:
        self.spare.hurry()
        for console in list(self.consoles):
            console.hurry()


async def until_either(first: Awaitable[object], second: Awaitable[object]) -> None:
    """Until one of them is done (what it raised, raised here); the other is cancelled."""
    tasks = [asyncio.ensure_future(first), asyncio.ensure_future(second)]
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    for task in done:
        task.result()


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
