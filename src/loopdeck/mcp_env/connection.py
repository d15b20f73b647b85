"""One MCP server, connected through the official SDK on a thread and event loop of its own.

The SDK's transports must be left by the task that entered them, so one owner task holds the
connection for the run and is told to leave with an anyio cancel scope (never a second
asyncio cancel: a shielded teardown can hang on one). Its own loop keeps the server apart
from the runtime's and the console's: the run reaches it from any thread (`call`: awaited
from the runtime's loop; `call_sync`/`read_sync`: from the env thread, where `snapshot()`
runs). Cancelling an awaited call cancels the SDK's request, which sends MCP's
`notifications/cancelled`.

A stdio server is loopdeck's own process under `loopdeck.workdir.guardian`
(`stdio_server.py`), so it never outlives the runner, and its end is seen as it happens,
whatever the run waits for: said once to whoever asked (`when_gone`), with its exit status.
A server over HTTP (`url`) is pinged every `ping_interval_s` instead: its connection failing
(refused, reset: the SDK's transport ends), a ping unanswered within the longest a request of
the run may take (`ping_bound_s`: a server busy with its slowest call is not gone), or
answered with an error (its session gone) is its end, said the same way, in the same words.
Its stderr goes to a file (`errlog`), whose tail names what went wrong; its log's warnings
are said and kept as the run's findings (`server_log.py`). A server that went
away is `ServerFailed` for every call and read from then on, at once (never a wait on its
timeout). What a server writes that is not JSON-RPC is one warning naming it
(`sdk_noise.py`), never the SDK's traceback.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

from loopdeck.core.text import capped, visible
from loopdeck.core.tools import Risk, ToolError
from loopdeck.mcp_env.config import McpConfig
from loopdeck.mcp_env.listing import ServerTool, listed_resources, listed_tools
from loopdeck.mcp_env.progress import Told, timed_call
from loopdeck.mcp_env.sdk_noise import SERVER, quiet_sdk_noise
from loopdeck.mcp_env.server_changes import CONNECTION_CLOSED, ServerChanges
from loopdeck.mcp_env.server_log import ServerLog
from loopdeck.mcp_env.stdio_server import StdioServer
from loopdeck.workdir.goal_check import stderr_tail

T = TypeVar("T")
# A stdio server's stop: stdin closed, 2 s, then its guardian's (SIGTERM, up to 10 s, SIGKILL).
CLOSE_WAIT_S = 16.0
REQUEST_TIMEOUT = -32001  # the SDK's, for a request past its read timeout
SAID_CAP = 1000  # a server's words in a stop's detail
EXIT_SEEN_S = 2.0  # from a server's output closing to its exit status


def ping_bound_s(config: McpConfig) -> float:
    """How long a ping may go unanswered before the server is gone: the longest any request
    of the run may take (`call_timeout_s`, a tool's or a snapshot entry's `timeout_s`), as a
    server may answer nothing else while it works on one (a tool that blocks its loop)."""
    entries = config.snapshot if isinstance(config.snapshot, list) else []
    configured = [override.timeout_s for override in config.tools.values()]
    configured += [entry.timeout_s for entry in entries]
    return max([config.call_timeout_s, *(t for t in configured if t is not None)])


class ServerFailed(Exception):
    """The server could not start, or went away; the message names it, with its stderr."""


class McpConnection:
    def __init__(self, config: McpConfig, workdir: Path, errlog: Path) -> None:
        self.config = config
        self.workdir = workdir
        self.errlog = errlog
        self.name = " ".join(config.command) if config.command else str(config.url)
        self.tools: list[ServerTool] = []
        self.resources: list[str] = []  # the URIs the server lists (`resources/list`)
        self.server_name = ""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._session: Any = None
        self._scope: Any = None
        self._ready = threading.Event()
        self._failure: BaseException | None = None
        self._stdio: StdioServer | None = None
        self._lock = threading.Lock()
        self._closing = False
        self._on_gone: Callable[[str], None] | None = None
        self._gone_said: str | None = None  # the server's end, in words, once it went away
        self.gone: str | None = None  # why the server is no longer there
        self.log = ServerLog(self.name)  # its warnings: said, and the run's findings
        self.changes = ServerChanges(self.name, config, self.log.say)  # what it says changed

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

        SERVER.set(self.name)  # the SDK's tasks on this loop inherit it
        self._loop = asyncio.get_running_loop()
        self._scope = anyio.CancelScope()
        try:
            with self._scope, self.errlog.open("a", encoding="utf-8") as errlog:
                await self._connected(errlog)
        except BaseException as exc:  # said to whoever waits; the thread ends
            self._failure = exc
            if self._session is not None:  # it was up: its connection ended by itself
                self._went_away(f"its connection ended: {_words(exc)}")
        finally:
            self.gone = self.gone or "the connection ended"
            self._ready.set()

    async def _connected(self, errlog: Any) -> None:
        import anyio
        from mcp import ClientSession

        async with self._transport(errlog) as streams:
            read, write = streams[0], streams[1]
            async with ClientSession(
                read, write, logging_callback=self.log.logged, message_handler=self.changes.noticed
            ) as session:
                self.changes.session = session
                with anyio.fail_after(self.config.startup_timeout_s):
                    init = await session.initialize()
                    self.tools = await listed_tools(session)
                    if (offers := init.capabilities.resources) is not None:
                        self.resources = await listed_resources(session)
                        await self.changes.subscribe(session, bool(offers.subscribe))
                self.server_name = init.server_info.name
                self._session = session
                self._ready.set()
                await self._until_gone(session)

    def _transport(self, errlog: Any) -> Any:
        if self.config.url is not None:
            from mcp.client.streamable_http import streamable_http_client

            return streamable_http_client(self.config.url)
        assert self.config.command is not None
        self._stdio = StdioServer(self.config.command, self.config.env, self.workdir, errlog)
        return self._stdio.streams()

    async def _until_gone(self, session: Any) -> None:
        """Until the connection is closed; a server that ends meanwhile is said at once to
        whoever asked (`when_gone`): a stdio server's process, or a server over HTTP found
        gone by a ping (`_pinged`)."""
        import anyio

        if self._stdio is not None:
            await self._stdio.ended.wait()
            await self._stdio.exit_status(EXIT_SEEN_S)
            ended = "its process ended" if self._stdio.status is not None else "its output closed"
            self._went_away(ended)
        elif self.config.ping_interval_s > 0:
            await self._pinged(session)
        await anyio.sleep_forever()

    async def _pinged(self, session: Any) -> None:
        """A server over HTTP pinged every `ping_interval_s` until one ping finds it gone:
        unanswered within `ping_bound_s`, or answered with an error. A connection refused
        or reset ends the SDK's transport instead, which `_own` says."""
        import anyio
        from mcp.shared.exceptions import MCPError

        every, within = self.config.ping_interval_s, ping_bound_s(self.config)
        while True:
            await anyio.sleep(every)
            try:
                with anyio.fail_after(within):
                    await session.send_ping()
            except TimeoutError:
                self._went_away(f"no answer to a ping within {within:g}s")
                return
            except MCPError as exc:
                self._went_away(f"a ping answered error {exc.error.code}: {exc.error.message}")
                return

    def _went_away(self, why: str) -> None:
        """The server is gone by itself: every later call fails at once, and it is said,
        once, to whoever watches it."""
        with self._lock:
            if self._closing or self._gone_said is not None:
                return
            self.gone = self.gone or why
            self._gone_said = said = self.failure_words(self.gone)
            told = self._on_gone
        if told is not None:
            told(said)

    def when_gone(self, told: Callable[[str], None]) -> None:
        """`told(words)`, from the connection's thread, once the server goes away by itself
        (at once if it has): its name, its exit status and its stderr's tail."""
        with self._lock:
            self._on_gone = told
            said = self._gone_said
        if said is not None:
            told(said)

    def close(self) -> None:
        """The server stopped (stdin closed, a grace, then its guardian: SIGTERM, SIGKILL),
        waited for up to CLOSE_WAIT_S. Safe to call more than once, from any thread."""
        with self._lock:
            self._closing = True
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
            if self._stdio is not None:  # said with its exit status, as it is known
                await self._stdio.exit_status(EXIT_SEEN_S)
            self.gone = self.gone or f"{what}: connection closed"
            raise ServerFailed(self.failure_words(f"{what}: connection closed")) from None

    async def call(
        self,
        tool: str,
        args: dict[str, Any],
        timeout_s: float,
        max_s: float | None = None,
        risk: Risk | None = None,
        told: Told | None = None,
    ) -> Any:
        """`tools/call`, awaited from another loop; its `CallToolResult`, within `timeout_s` of
        its start or its last progress, `max_s` at most (`progress.py`), each progress told to
        `told` from the connection's thread. Called as `risk` (None: as the run started with
        it), vetted against the tools as the server last listed them (`ServerChanges.vetted`).
        Cancelling it cancels the request (`notifications/cancelled`)."""
        what = f"tools/call {tool}"
        most = timeout_s if max_s is None else max_s
        future = self._submit(
            what,
            lambda s: self.changes.vetted(
                tool, risk, lambda: timed_call(s, tool, args, timeout_s, most, told)
            ),
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
            what,
            lambda s: self.changes.vetted(
                tool, None, lambda: s.call_tool(tool, args, read_timeout_seconds=timeout_s)
            ),
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
        return self.with_stderr(f"MCP server `{self.name}` {what}: {why}")

    def with_stderr(self, said: str) -> str:
        """`said`, and the tail of what the server wrote on stderr, if it wrote anything."""
        tail = ""
        with contextlib.suppress(OSError):
            tail = stderr_tail(self.errlog.read_text(encoding="utf-8", errors="replace"))
        return said + (f"; stderr: {tail}" if tail else "")

    def request_failed(self, exc: Exception, timeout_s: float) -> str:
        """A request the server failed, in words naming it: no answer in time, a tool's
        `isError` (its words), or its protocol error (its code and words)."""
        from mcp.shared.exceptions import MCPError

        code = exc.error.code if isinstance(exc, MCPError) else None
        if isinstance(exc, TimeoutError) or code == REQUEST_TIMEOUT:
            return f"MCP server `{self.name}` gave no answer within {timeout_s:g}s"
        if isinstance(exc, ToolError):
            said = f"said: {exc.message}"
        elif isinstance(exc, MCPError):
            said = f"answered error {code}: {exc.error.message}"
        else:
            said = f"failed: {type(exc).__name__}: {exc}"
        return f"MCP server `{self.name}` {capped(visible(said), SAID_CAP)}"

    def failure_words(self, why: str) -> str:
        """A server gone mid-run, in words: its exit status once it exited, what the call
        met, and its stderr's tail."""
        status = None if self._stdio is None else self._stdio.status
        if status is None:
            return self._said("went away", why)
        exited = f"exit status {status}" if status >= 0 else f"killed by signal {-status}"
        return self._said(f"went away ({exited})", why)


def _words(exc: BaseException) -> str:
    """The first real error inside the SDK's nested exception groups."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, TimeoutError):
        return "no answer in time"
    return f"{type(exc).__name__}: {exc}"
