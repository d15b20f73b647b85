"""What an MCP server lists: its tools (`tools/list`, as `ServerTool`s: the hints loopdeck
classes their risk by) and its resources' URIs (`resources/list`), every page of each."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ServerTool:
    name: str
    description: str
    input_schema: dict[str, Any]
    read_only: bool | None  # the server's readOnlyHint (None: no annotation)
    destructive: bool | None
    task_support: str | None = None  # execution.taskSupport: "required" runs only as a task


async def listed_tools(session: Any) -> list[ServerTool]:
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
                    task_support=None if tool.execution is None else tool.execution.task_support,
                )
            )
        cursor = page.next_cursor
        if not cursor:
            return tools


async def listed_resources(session: Any) -> list[str]:
    from mcp.types import PaginatedRequestParams

    uris: list[str] = []
    cursor = None
    while True:
        page = await session.list_resources(
            params=PaginatedRequestParams(cursor=cursor) if cursor else None
        )
        uris += [str(resource.uri) for resource in page.resources]
        cursor = page.next_cursor
        if not cursor:
            return uris
