"""One MCP server, connected through the official SDK on a thread and event loop of its own.

The SDK's transports must be left by the task that entered them, so one owner task holds the
connection for the run and is told to leave with an anyio cancel scope (never a second
asyncio cancel: the SDK's shielded teardown can hang on one). Its own loop keeps the server
apart from the runtime's and the console's: the run reaches it from any thread
(`call`: awaited from the runtime's loop; `call_sync`/`read_sync`: from the env thread, where
`snapshot()` runs). Cancelling an awaited call cancels the SDK's request, which sends MCP's
`notifications/cancelled`.

A stdio server runs under `loopdeck.workdir.guardian`, so it never outlives the runner; its
stderr goes to a file (`errlog`), whose tail names what went wrong. A server that went away is
`ServerFailed` for every call and read from then on, at once (never a wait on its timeout).
What a server writes that is not JSON-RPC is one warning naming it (`SdkNoise`), never the
SDK's traceback.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import json
import logging
import sys
import threading
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from pydantic import ValidationError

from loopdeck.core.text import capped, visible
from loopdeck.mcp_env.config import McpConfig
from loopdeck.workdir.goal_check import stderr_tail

T = TypeVar("T")
CLOSE_WAIT_S = 8.0  # the SDK's own teardown: stdin closed, 2 s, SIGTERM, 2 s, SIGKILL
CONNECTION_CLOSED = -32000  # MCP's error code for a connection that ended under a request
SAID_CAP = 200
log = logging.getLogger("loopdeck.mcp")
# The server whose connection's loop runs the current task: the SDK's records name none.
_SERVER: contextvars.ContextVar[str] = contextvars.ContextVar("loopdeck_mcp_server", default="")


class ServerFailed(Exception):
    """The server could not start, or went away; the message names it, with its stderr."""


@dataclass(frozen=True)
class ServerTool:
    name: str
    description: str
    input_schema: dict[str, Any]
    read_only: bool | None  # the server's readOnlyHint (None: no annotation)
    destructive: bool | None


class McpConnection:
    def __init__(self, config: McpConfig, workdir: Path, errlog: Path) -> None:
        self.config = config
        self.workdir = workdir
        self.errlog = errlog
        self.name = " ".join(config.command) if config.command else str(config.url)
        self.tools: list[ServerTool] = []
        self.server_name = ""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._session: Any = None
        self._scope: Any = None
        self._ready = threading.Event()
        self._failure: BaseException | None = None
        self.gone: str | None = None  # why the server is no longer there

    # -- starting and stopping -------------------------------------------------------
    def start(self) -> None:
        """Start the server, initialize and list its tools; `ServerFailed` past
        `startup_timeout_s` or when it fails, with its stderr's tail."""
        quiet_sdk_noise()
        self._thread = threading.Thread(target=self._main, name="loopdeck-mcp", daemon=True)
        self._thread.start()
        if not self._ready.wait(self.config.startup_timeout_s + 5):
            said = self._said("did not start", "no answer in time")
            self.close()
            raise ServerFailed(said)
        if self._failure is not None:
            said = self._said("did not start", _words(self._failure))
            self.close()
            raise ServerFailed(said) from None

    def _main(self) -> None:
        asyncio.run(self._own())

    async def _own(self) -> None:
        import anyio

        _SERVER.set(self.name)  # the SDK's tasks on this loop inherit it
        self._loop = asyncio.get_running_loop()
        self._scope = anyio.CancelScope()
        try:
            with self._scope, self.errlog.open("a", encoding="utf-8") as errlog:
                await self._connected(errlog)
        except BaseException as exc:  # said to whoever waits; the thread ends
            self._failure = exc
        finally:
            self.gone = self.gone or "the connection ended"
            self._ready.set()

    async def _connected(self, errlog: Any) -> None:
        import anyio
        from mcp import ClientSession

        async with self._transport(errlog) as streams:
            read, write = streams[0], streams[1]
            async with ClientSession(read, write) as session:
                with anyio.fail_after(self.config.startup_timeout_s):
                    init = await session.initialize()
                    self.tools = await _listed_tools(session)
                self.server_name = init.server_info.name
                self._session = session
                self._ready.set()
                await anyio.sleep_forever()

    def _transport(self, errlog: Any) -> Any:
        if self.config.url is not None:
            from mcp.client.streamable_http import streamable_http_client

            return streamable_http_client(self.config.url)
        from mcp import StdioServerParameters
        from mcp.client.stdio import stdio_client

        assert self.config.command is not None
        guarded = ["-m", "loopdeck.workdir.guardian", *self.config.command]
        params = StdioServerParameters(
            command=sys.executable, args=guarded, env=self.config.env, cwd=self.workdir
        )
        return stdio_client(params, errlog=errlog)

    def close(self) -> None:
        """The server stopped (stdin closed, then SIGTERM and SIGKILL to its group by the SDK),
        waited for up to CLOSE_WAIT_S. Safe to call more than once, from any thread."""
        loop, scope = self._loop, self._scope
        if loop is not None and scope is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop already ended
                loop.call_soon_threadsafe(scope.cancel)
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(CLOSE_WAIT_S)
        self.gone = self.gone or "closed"
        self.errlog.unlink(missing_ok=True)  # its tail was said where it mattered

    # -- calls -------------------------------------------------------------------------
    def _submit(
        self, what: str, make: Callable[[Any], Coroutine[Any, Any, T]]
    ) -> concurrent.futures.Future[T]:
        """`make(session)` on the connection's loop; a server known gone fails at once."""
        session, loop = self._session, self._loop
        if self.gone is not None or self._failure is not None or session is None or loop is None:
            raise ServerFailed(self.failure_words(f"{what}: {self.gone or 'not connected'}"))
        request = self._guarded(what, make, session)
        try:
            return asyncio.run_coroutine_threadsafe(request, loop)
        except RuntimeError:  # its loop ended between the check and the call
            request.close()
            raise ServerFailed(self.failure_words(f"{what}: the connection ended")) from None

    async def _guarded(
        self, what: str, make: Callable[[Any], Coroutine[Any, Any, T]], session: Any
    ) -> T:
        """The request; the connection closed under it (the server died or closed its
        output) is `ServerFailed`, and the server gone for every later call."""
        from mcp.shared.exceptions import MCPError

        try:
            return await make(session)
        except MCPError as exc:
            if exc.error.code != CONNECTION_CLOSED:
                raise
            self.gone = self.gone or f"{what}: connection closed"
            raise ServerFailed(self.failure_words(self.gone)) from None

    async def call(self, tool: str, args: dict[str, Any], timeout_s: float) -> Any:
        """`tools/call`, awaited from another loop; its `CallToolResult`. Cancelling it cancels
        the request (MCP's `notifications/cancelled`)."""
        what = f"tools/call {tool}"
        future = self._submit(
            what, lambda s: s.call_tool(tool, args, read_timeout_seconds=timeout_s)
        )
        try:
            return await asyncio.wrap_future(future)
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if future.cancelled() and task is not None and not task.cancelling():
                # Not our cancel: the connection's loop ended with the request in flight.
                raise ServerFailed(self.failure_words(f"{what}: the connection ended")) from None
            raise

    def call_sync(self, tool: str, args: dict[str, Any], timeout_s: float) -> Any:
        what = f"tools/call {tool}"
        future = self._submit(
            what, lambda s: s.call_tool(tool, args, read_timeout_seconds=timeout_s)
        )
        return self._result(what, future, timeout_s)

    def read_sync(self, uri: str, timeout_s: float) -> Any:
        """`resources/read` from a thread that is not the connection's; its result."""
        what = f"resources/read {uri}"
        return self._result(what, self._submit(what, lambda s: s.read_resource(uri)), timeout_s)

    def _result(self, what: str, future: concurrent.futures.Future[T], timeout_s: float) -> T:
        try:
            return future.result(timeout_s + 1)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise TimeoutError(f"no answer within {timeout_s:g}s") from None
        except concurrent.futures.CancelledError:  # the connection's loop ended under it
            raise ServerFailed(self.failure_words(f"{what}: the connection ended")) from None

    def _said(self, what: str, why: str) -> str:
        tail = ""
        with contextlib.suppress(OSError):
            tail = stderr_tail(self.errlog.read_text(encoding="utf-8", errors="replace"))
        return f"MCP server `{self.name}` {what}: {why}" + (f"; stderr: {tail}" if tail else "")

    def failure_words(self, why: str) -> str:
        """A server gone mid-run, in words: what the call met, and its stderr's tail."""
        return self._said("went away", why)


async def _listed_tools(session: Any) -> list[ServerTool]:
    from mcp.types import PaginatedRequestParams

    tools: list[ServerTool] = []
    cursor = None
    while True:
        page = await session.list_tools(
            params=PaginatedRequestParams(cursor=cursor) if cursor else None
        )
        for tool in page.tools:
            hints = tool.annotations
            tools.append(
                ServerTool(
                    name=tool.name,
                    description=tool.description or tool.title or tool.name,
                    input_schema=dict(tool.input_schema or {}),
                    read_only=None if hints is None else hints.read_only_hint,
                    destructive=None if hints is None else hints.destructive_hint,
                )
            )
        cursor = page.next_cursor
        if not cursor:
            return tools


def _words(exc: BaseException) -> str:
    """The first real error inside the SDK's nested exception groups."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, TimeoutError):
        return "no answer in time"
    return f"{type(exc).__name__}: {exc}"


# -- what a server says that is not JSON-RPC ---------------------------------------------------
class SdkNoise(logging.Filter):
    """The SDK logs each line a server writes that is not JSON-RPC, and each malformed
    message, with a pydantic traceback, over the console and a headless run's output: each
    becomes one warning naming the server, on `loopdeck.mcp`. The record's task runs on its
    connection's loop, whose context names the server."""

    def filter(self, record: logging.LogRecord) -> bool:
        said = _noise(record)
        if said is None:
            return True
        log.warning("MCP server `%s` %s", _SERVER.get() or "(unnamed)", said)
        return False


# The SDK's records (mcp 2.3) of a message it could not read, by logger and words.
_PARSE = {
    "mcp.client.stdio": "Failed to parse JSONRPC message",
    "mcp.client.streamable_http": "Error parsing",
}
_NOTIFICATION = ("client", "Failed to validate notification")  # the SDK's session's logger
_SDK_NOISE = SdkNoise()


def quiet_sdk_noise() -> None:
    for name in (*_PARSE, _NOTIFICATION[0]):
        logger = logging.getLogger(name)
        if _SDK_NOISE not in logger.filters:
            logger.addFilter(_SDK_NOISE)


def _noise(record: logging.LogRecord) -> str | None:
    """What the server said, in words, for a record of the SDK's not reading it; else None."""
    exc = record.exc_info[1] if record.exc_info else None
    words, parse = str(record.msg), _PARSE.get(record.name)
    if parse is not None and words.startswith(parse):
        return f"wrote a line that is not JSON-RPC: {_input_of(exc)}"
    if (record.name, words.split(":")[0]) == _NOTIFICATION:
        method = record.args[0] if isinstance(record.args, tuple) and record.args else "?"
        return f"sent a malformed notification `{method}`: {_errors_of(exc)}"
    return None


def _input_of(exc: BaseException | None) -> str:
    """The line the server wrote, as pydantic kept it, shown as text and capped."""
    if isinstance(exc, ValidationError) and exc.errors():
        given = exc.errors()[0].get("input")
        text = given if isinstance(given, str) else json.dumps(given, default=str)
    else:
        text = str(exc)
    return capped(visible(text), SAID_CAP)


def _errors_of(exc: BaseException | None) -> str:
    if not isinstance(exc, ValidationError):
        return capped(visible(str(exc)), SAID_CAP)
    said = "; ".join(
        f"{'.'.join(str(p) for p in error['loc'])}: {error['msg']}" for error in exc.errors()[:3]
    )
    return capped(visible(said), SAID_CAP)
