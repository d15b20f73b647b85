"""What an MCP server says changed under a run: its tools, or the resources its state is read
from. The SDK's client session surfaces both to its `message_handler` (`noticed`), so loopdeck
lists nothing again unless the server says it changed (a `tools/list` before every call
would cost every call a round trip to the server).

- `notifications/tools/list_changed`: the tools listed again at once, on the connection's
  loop (a task of its own: the SDK's handler must not wait on the server), and told to the
  env (`tools_told`, `tool_changes.py`: a tool now less safe, gone, or new). A call waits for
  that list, or lists again itself if it failed (`vetted`), then is vetted by the env
  against it (`vet`): no call runs on a list the server said is out of date.
- `notifications/resources/updated` (for the snapshot's resources, subscribed to as the
  server starts when it offers subscriptions) and `notifications/resources/list_changed`:
  the state may have changed with no tool run, told at once (`state_told`): under
  `state_changes = "by_writes"` the run's next look reads it (`core/state_reads.py`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from loopdeck.core.text import capped, visible
from loopdeck.core.tools import ErrorCode, Risk, ToolError
from loopdeck.mcp_env.config import McpConfig
from loopdeck.mcp_env.listing import ServerTool, listed_tools

T = TypeVar("T")
CONNECTION_CLOSED = -32000  # MCP's error code for a connection that ended under a request
WORDS_CAP = 300  # a failed re-list's words

# The env's word on a tool about to be called as `risk` (None: as the run started with it),
# the tools as last listed: a `ToolError` refuses it.
Vet = Callable[[str, Risk | None], None]


class ServerChanges:
    def __init__(self, name: str, config: McpConfig, say: Callable[[str], None]) -> None:
        self.name = name
        self.config = config
        self.say = say  # a warning, and the run's finding (`ServerLog.say`)
        self.session: Any = None
        self.subscribed: list[str] = []  # the resources whose updates the server sends
        self.tools_told: Callable[[list[ServerTool]], None] | None = None
        self.state_told: Callable[[], None] | None = None
        self.vet: Vet | None = None
        self._stale = False  # the server said its tools changed, and they are not listed yet
        self._relisting: asyncio.Task[None] | None = None

    async def noticed(self, message: Any) -> None:
        """The SDK's `message_handler`, on the connection's loop."""
        from mcp.types import (
            ResourceListChangedNotification,
            ResourceUpdatedNotification,
            ToolListChangedNotification,
        )

        match message:
            case ToolListChangedNotification():
                self._stale = True
                if self._relisting is None or self._relisting.done():
                    self._relisting = asyncio.get_running_loop().create_task(self._relist())
            case ResourceUpdatedNotification() | ResourceListChangedNotification():
                told = self.state_told
                if told is not None:
                    told()
            case _:
                pass

    async def subscribe(self, session: Any, offered: bool) -> None:
        """As the server starts: the snapshot's resources subscribed to, when it `offered`
        subscriptions (`resources.subscribe`). One it refuses is said: its changes are then
        seen only after a write."""
        from mcp.shared.exceptions import MCPError
        from mcp.types import EmptyResult, SubscribeRequest, SubscribeRequestParams

        entries = self.config.snapshot if isinstance(self.config.snapshot, list) else []
        uris = [entry.resource for entry in entries if entry.resource is not None]
        for uri in uris if offered else []:
            request = SubscribeRequest(params=SubscribeRequestParams(uri=uri))
            try:  # the request itself: the SDK's `subscribe_resource` warns it is deprecated
                await session.send_request(request, EmptyResult)
            except MCPError as exc:
                self.say(
                    f"MCP server `{self.name}` refused a subscription to {uri}"
                    f" ({capped(visible(exc.error.message), WORDS_CAP)}): its changes are seen"
                    " only after a write"
                )
                continue
            self.subscribed.append(uri)

    async def vetted(self, tool: str, risk: Risk | None, call: Callable[[], Awaitable[T]]) -> T:
        """`call()`, once the tools are as the server last said (a re-list under way waited
        for, one that failed tried again: its failure this call's `ToolError`, not run) and
        the env's `vet` let `tool` run as `risk`. Its answer waits for a re-list the server
        asked for during it, so the run has the change before it makes its next call."""
        await self._relisted()
        if self._stale:
            try:
                await self._listed_again()
            except (TimeoutError, ToolError) as exc:
                raise ToolError(
                    ErrorCode.TEMPORARY_UNAVAILABLE,
                    f"{tool} not called: MCP server `{self.name}` said its tools changed, and"
                    f" listing them again failed: {exc}",
                    applied=False,
                ) from None
        if self.vet is not None:
            self.vet(tool, risk)
        answer = await call()
        await self._relisted()
        return answer

    async def _relisted(self) -> None:
        """A re-list under way, ended (it says its own failure)."""
        task = self._relisting
        if task is not None and not task.done():
            await asyncio.wait({task})

    async def _relist(self) -> None:
        from mcp.shared.exceptions import MCPError

        try:
            await self._listed_again()
        except MCPError:
            return  # the connection closed: the connection says it (`when_gone`)
        except (TimeoutError, ToolError) as exc:  # the next call lists them first
            self.say(
                f"MCP server `{self.name}` said its tools changed, and listing them again"
                f" failed ({exc}): its next call lists them first"
            )

    async def _listed_again(self) -> None:
        """`tools/list` until no change was said during it, each list told to the env; a
        protocol error or an answer that cannot be read is a `ToolError` (the list still
        stale), the connection closed left to the connection."""
        import anyio
        from mcp.shared.exceptions import MCPError

        while self._stale:
            self._stale = False
            try:
                with anyio.fail_after(self.config.call_timeout_s):
                    tools = await listed_tools(self.session)
            except TimeoutError:
                self._stale = True
                raise TimeoutError(f"no answer within {self.config.call_timeout_s:g}s") from None
            except MCPError as exc:
                self._stale = True
                if exc.error.code == CONNECTION_CLOSED:
                    raise
                said = f"error {exc.error.code}: {capped(visible(exc.error.message), WORDS_CAP)}"
                raise ToolError(ErrorCode.TOOL_ERROR, said) from None
            except Exception as exc:  # an answer the SDK could not read (its ValidationError)
                self._stale = True
                said = capped(visible(f"{type(exc).__name__}: {exc}"), WORDS_CAP)
                raise ToolError(
                    ErrorCode.TOOL_ERROR, f"its answer was not a list: {said}"
                ) from None
            told = self.tools_told
            if told is not None:
                told(tools)
