"""A tool call timed by its progress (MCP's `notifications/progress`), as MCP advises: each
progress the server reports gives the call its timeout again, so a long operation that keeps
saying how far it is goes on, while one that goes quiet for its timeout is cut; and however
much it reports, it ends at `[mcp] progress_max_s` from its start. Either cut is the tool's
`TIMEOUT`, naming how long it waited and the last progress the server reported (a write's
outcome is then unknown, as for any timeout).

Each report is told to `told` as well (the run's `CallProgress`: shown with the call, recorded
as `tool_progress`). It runs on the connection's loop (`McpConnection.call`), where the SDK
calls `progressed`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from loopdeck.core.progress_events import progress_words
from loopdeck.core.tools import ErrorCode, ToolError

Told = Callable[[float, float | None, str | None], None]  # from the connection's thread


@dataclass(frozen=True)
class Progress:
    progress: float
    total: float | None
    message: str | None

    def words(self) -> str:
        return progress_words(self.progress, self.total, self.message)


async def timed_call(
    session: Any,
    tool: str,
    args: dict[str, Any],
    timeout_s: float,
    max_s: float,
    told: Told | None = None,
) -> Any:
    """`tools/call`, cut `timeout_s` after its start or its last progress, and `max_s` after
    its start at most: a `ToolError` (`TIMEOUT`) saying which. Its `CallToolResult`; each
    progress reported told to `told`."""
    import anyio

    started = anyio.current_time()
    end = started + max(max_s, timeout_s)
    last: list[Progress] = []

    with anyio.CancelScope(deadline=min(started + timeout_s, end)) as scope:

        async def progressed(progress: float, total: float | None, message: str | None) -> None:
            last[:] = [Progress(progress, total, message)]
            scope.deadline = min(anyio.current_time() + timeout_s, end)
            if told is not None:
                told(progress, total, message)

        return await session.call_tool(
            tool, args, read_timeout_seconds=end - started + 1, progress_callback=progressed
        )
    at_most = end - started if scope.deadline >= end else None
    raise ToolError(ErrorCode.TIMEOUT, _cut(tool, last, timeout_s, at_most))


def _cut(tool: str, last: list[Progress], timeout_s: float, at_most: float | None) -> str:
    if not last:
        return f"{tool} gave no answer and no progress within {timeout_s:g}s"
    reported = f"its last progress {last[0].words()}"
    if at_most is not None:
        return (
            f"{tool} still running after {at_most:g}s, the most a call reporting progress"
            f" may run ([mcp] progress_max_s, at least its timeout); {reported}"
        )
    return f"{tool} reported no progress for {timeout_s:g}s; {reported}"
