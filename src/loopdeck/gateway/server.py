"""The gateway's HTTP server (aiohttp, on 127.0.0.1): the three formats' paths, each call let in
by its run's token (`Authorization: Bearer` or `x-api-key`) and handed to that run's door.

A streamed call is answered as a stream once its run has decided it; while it is held (a
write waiting for the operator) the connection is kept alive with the format's keep-alive
every `keepalive_s` (an SSE comment; Anthropic's `ping` event), the stream's headers sent at
the first one. An error decided before the stream started is an HTTP error in the format; one
decided after, an error event inside the stream; an upstream's failure keeps its status and
`retry-after`.

An agent whose connection closes while its call waits (its client timed out) is noticed
(aiohttp cancels the handler: `handler_cancellation`, or a keep-alive that cannot be written):
the call is marked `gone`, and its run delivers nothing to nobody (`tool_uses.Undelivered`).
One that closes once its answer is settled, before the answer is written, is told to the run
(`Door.lost`), which records the answer as not delivered.

A token whose run has ended (its door closed), or whose run could not start, is told so by
name (400, not retried), never as an unknown key.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from loopdeck.gateway.answer import ApiFormat
from loopdeck.gateway.chat_format import ChatFormat
from loopdeck.gateway.door import REFUSED, REFUSED_STATUS, Door, ModelCall, Outcome
from loopdeck.gateway.messages_format import MessagesFormat
from loopdeck.gateway.responses_format import ResponsesFormat

FORWARDED_HEADERS = ("anthropic-beta",)
STREAM_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
MAX_BODY = 256 * 1024 * 1024  # a long conversation with images; the default is 1 MiB
NO_TOKEN = "no token of a loopdeck run: set the key the gateway gave the agent"
RUN_ENDED = (
    "loopdeck: the run this token was made for has ended; the gateway takes no more calls for"
    " it (a new run needs a new token)"
)
COULD_NOT_START = (
    "loopdeck: the run this token was made for could not start (`loopdeck gateway serve` said"
    " why); a token is one run: make a new one"
)


class Clock:
    """How a held call waits: `wait` is True once `done` is, False after `timeout_s`."""

    async def wait(self, done: asyncio.Future[Any], timeout_s: float) -> bool:
        await asyncio.wait({done}, timeout=timeout_s)
        return done.done()


CLOCK = Clock()
FORMATS: dict[str, ApiFormat] = {
    "chat": ChatFormat(), "responses": ResponsesFormat(), "messages": MessagesFormat(),
}  # fmt: skip
ROUTES = {
    "/v1/chat/completions": "chat", "/chat/completions": "chat",
    "/v1/responses": "responses", "/responses": "responses",
    "/v1/messages": "messages",
}  # fmt: skip


class GatewayServer:
    """The doors of the runs it serves, by token, and the server they are reached by."""

    def __init__(self, keepalive_s: float, clock: Clock | None = None) -> None:
        self.keepalive_s = keepalive_s
        self.clock = clock or CLOCK
        self.doors: dict[str, Door] = {}
        self.ended: set[str] = set()  # the tokens whose run's door has closed
        self._opening: dict[str, asyncio.Event] = {}  # a served run's door, awaited
        self.url = ""
        self._runner: web.AppRunner | None = None
        # Told of a token no door has (`serve` opens a run for it); None: refused.
        self.unknown_token: Callable[[str], Awaitable[Door | None]] | None = None

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        app = web.Application(client_max_size=MAX_BODY)
        for path, name in ROUTES.items():
            app.router.add_post(path, self._handler(FORMATS[name]))
        app.router.add_post("/v1/messages/count_tokens", self._not_served)
        app.router.add_get("/v1/models", self._models)
        app.router.add_route("*", "/", self._alive)
        self._runner = web.AppRunner(
            app, access_log=None, handle_signals=False, handler_cancellation=True
        )
        await self._runner.setup()
        await web.TCPSite(self._runner, host, port).start()
        self.url = f"http://{host}:{self._runner.addresses[0][1]}"
        return self.url

    async def stop(self) -> None:
        """No more calls taken; those in flight answered first (aiohttp's own bound)."""
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    def open_door(self, door: Door) -> None:
        self.doors[door.token] = door
        self._opening.setdefault(door.token, asyncio.Event()).set()

    async def door_opened(self, token: str, run: asyncio.Future[Any]) -> Door | None:
        """The token's door once its run opens it; None if the run ends first (or ended)."""
        if token in self.doors or run.done():
            return self.doors.get(token)
        opened = asyncio.ensure_future(self._opening.setdefault(token, asyncio.Event()).wait())
        try:
            await asyncio.wait({opened, run}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            opened.cancel()
        return self.doors.get(token)

    def close_door(self, door: Door) -> None:
        self.doors.pop(door.token, None)
        self.ended.add(door.token)

    async def _door_of(self, request: web.Request) -> Door | str:
        """The token's door, or why there is none."""
        said = request.headers.get("authorization", "")
        token = said[7:].strip() if said.lower().startswith("bearer ") else ""
        token = token or request.headers.get("x-api-key", "").strip()
        if not token:
            return NO_TOKEN
        door = self.doors.get(token)
        if door is None and token not in self.ended and self.unknown_token is not None:
            door = await self.unknown_token(token)
        if door is not None:
            return door
        if token in self.ended:
            return RUN_ENDED
        return COULD_NOT_START if token in self._opening else NO_TOKEN

    def _handler(self, api: ApiFormat) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
        async def handle(request: web.Request) -> web.StreamResponse:
            door = await self._door_of(request)
            if door == NO_TOKEN:
                return _error(api, 401, "authentication_error", NO_TOKEN)
            if not isinstance(door, Door):
                return _error(api, REFUSED_STATUS, REFUSED, door)
            try:
                body = await request.json()
            except ValueError:
                body = None
            if not isinstance(body, dict):
                return _error(api, 400, "invalid_request_error", "the body is not a JSON object")
            headers = {k: v for k in FORWARDED_HEADERS if (v := request.headers.get(k))}
            call = ModelCall(api, body, body.get("stream") is True, headers)
            door.submit(call)
            try:
                if not call.stream:
                    response = _answered(api, await asyncio.shield(call.answered))
                    delivered = await _sent(response, request, [])
                else:
                    response, delivered = await self._stream(request, call)
            except asyncio.CancelledError:  # the agent's connection closed
                _gone(door, call)
                raise
            if not delivered:
                _gone(door, call)
            return response

        return handle

    async def _stream(
        self, request: web.Request, call: ModelCall
    ) -> tuple[web.StreamResponse, bool]:
        """The decided answer as a stream, kept alive while it is held, and whether it was
        delivered. An agent gone meanwhile (its connection closed) is not written to: the run
        records what became of it."""
        api = call.api
        response = web.StreamResponse(headers=STREAM_HEADERS)
        if not await self.clock.wait(call.answered, self.keepalive_s):
            try:
                await response.prepare(request)
                await response.write(api.keepalive())
                while not await self.clock.wait(call.answered, self.keepalive_s):
                    await response.write(api.keepalive())
            except ConnectionError:  # the agent went away while its call was held
                return response, False
        outcome = call.answered.result()
        if outcome.answer is not None:
            return response, await _sent(response, request, api.frames(outcome.answer))
        if response.prepared:
            said = api.stream_error(outcome.kind, outcome.message, outcome.code)
            return response, await _sent(response, request, [said])
        whole = _answered(api, outcome)
        return whole, await _sent(whole, request, [])

    async def _models(self, request: web.Request) -> web.StreamResponse:
        door = await self._door_of(request)
        if not isinstance(door, Door):
            return _error(FORMATS["chat"], 401, "authentication_error", door)
        model = {"id": door.model, "object": "model", "owned_by": "loopdeck"}
        return web.json_response({"object": "list", "data": [model]})

    async def _not_served(self, request: web.Request) -> web.StreamResponse:
        said = f"{request.path}: not served by loopdeck's gateway (the agent estimates instead)"
        return _error(FORMATS["messages"], 404, "not_found_error", said)

    async def _alive(self, request: web.Request) -> web.StreamResponse:
        return web.Response(status=200)


def _answered(api: ApiFormat, outcome: Outcome) -> web.StreamResponse:
    if outcome.answer is not None:
        return web.json_response(outcome.answer)
    return _error(api, outcome.status, outcome.kind, outcome.message, outcome.headers, outcome.code)


def _error(
    api: ApiFormat,
    status: int,
    kind: str,
    message: str,
    headers: dict[str, str] | None = None,
    code: str | None = None,
) -> web.StreamResponse:
    body = api.error(status, kind, message, code)
    return web.json_response(body, status=status, headers=headers)


async def _sent(response: web.StreamResponse, request: web.Request, frames: list[bytes]) -> bool:
    """`frames` on the stream (its headers sent first, unless they were; a whole response's
    body with them), and whether they went; nothing to an agent whose connection is gone
    (aiohttp's `ConnectionResetError`, its own subclass `ClientConnectionResetError` among
    them: "Cannot write to closing transport")."""
    try:
        if not response.prepared:
            await response.prepare(request)
        for frame in frames:
            await response.write(frame)
        await response.write_eof()
    except ConnectionError:
        return False
    return True


def _gone(door: Door, call: ModelCall) -> None:
    """The agent's connection closed: before its call was settled, the run delivers nothing
    to nobody (`gone`); after, the run is told its answer was lost (`Door.lost`)."""
    call.gone.set()
    if call.answered.done():
        door.lost(call)
