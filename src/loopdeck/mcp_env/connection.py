"""One MCP server, connected through the official SDK on a thread and event loop of its own.

The SDK's transports must be left by the task that entered them, so one owner task holds the
connection for the run and is told to leave with an anyio cancel scope (never a second
asyncio cancel: the SDK's shielded teardown can hang on one). Its own loop keeps the server
apart from the runtime's and the console's: the run reaches it from any thread
(`call`: awaited from the runtime's loop; `call_sync`/`read_sync`: from the env thread, where
`snapshot()` runs). Cancelling an awaited call cancels the SDK's request, which sends MCP's
`notifications/cancelled`.

A stdio server runs under `loopdeck.mcp_env.guardian`, so it never outlives the runner; its
stderr goes to a file (`errlog`), whose tail names what went wrong.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import sys
import threading
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from loopdeck.core.mcp_config import McpConfig
from loopdeck.mcp_env.goal_check import stderr_tail

T = TypeVar("T")
CLOSE_WAIT_S = 8.0  # the SDK's own teardown: stdin closed, 2 s, SIGTERM, 2 s, SIGKILL


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
        guarded = ["-m", "loopdeck.mcp_env.guardian", *self.config.command]
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
        self, make: Callable[[Any], Coroutine[Any, Any, T]]
    ) -> concurrent.futures.Future[T]:
        session, loop = self._session, self._loop
        if session is None or loop is None or self._failure is not None:
            raise ServerFailed(self._said("is gone", self.gone or "not connected"))
        return asyncio.run_coroutine_threadsafe(make(session), loop)

    def call(self, tool: str, args: dict[str, Any], timeout_s: float) -> Awaitable[Any]:
        """`tools/call`, awaited from another loop; its `CallToolResult`."""
        future = self._submit(lambda s: s.call_tool(tool, args, read_timeout_seconds=timeout_s))
        return asyncio.wrap_future(future)

    def call_sync(self, tool: str, args: dict[str, Any], timeout_s: float) -> Any:
        future = self._submit(lambda s: s.call_tool(tool, args, read_timeout_seconds=timeout_s))
        return _result(future, timeout_s)

    def read_sync(self, uri: str, timeout_s: float) -> Any:
        """`resources/read` from a thread that is not the connection's; its result."""
        return _result(self._submit(lambda s: s.read_resource(uri)), timeout_s)

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


def _result(future: concurrent.futures.Future[T], timeout_s: float) -> T:
    try:
        return future.result(timeout_s + 1)
    except concurrent.futures.TimeoutError:
        future.cancel()
        raise TimeoutError(f"no answer within {timeout_s:g}s") from None


def _words(exc: BaseException) -> str:
    """The first real error inside the SDK's nested exception groups."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, TimeoutError):
        return "no answer in time"
    return f"{type(exc).__name__}: {exc}"
