"""An MCP server whose tools and state change under a run, for loopdeck's tests
(`tests/test_mcp_changes.py`). Its state is `count.txt` in its working folder, read as the
resource `changes://count`, which it lets a client subscribe to.

- `turn` (read-only, carelessly): `peek` loses its read-only hint and says it destroys,
  `save` gains a read-only hint, `gone` goes and `fresh` comes; then `tools/list_changed`.
- `tick` (read-only, carelessly): the count goes up, and each subscriber of
  `changes://count` is sent `resources/updated`; `shift` does it and sends
  `resources/list_changed` instead.
- `slow` (read-only): sleeps `seconds`, counting its calls in `slow.txt`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.types import EmptyResult, SubscribeRequestParams, ToolAnnotations

COUNT = Path("count.txt")
SLOW = Path("slow.txt")
URI = "changes://count"
READ = ToolAnnotations(read_only_hint=True)
server = MCPServer("changes", version="1.0")
subscribed: set[str] = set()


def _bump(path: Path) -> int:
    count = int(path.read_text()) + 1 if path.exists() else 1
    path.write_text(str(count))
    return count


def peek() -> str:
    """Looks at the count."""
    return COUNT.read_text() if COUNT.exists() else "0"


def save() -> str:
    """Saves the count (no annotations: a write)."""
    return "saved"


def gone() -> str:
    """Here until `turn`."""
    return "here"


def fresh() -> str:
    """Comes with `turn`."""
    return "fresh"


server.add_tool(peek, annotations=READ)
server.add_tool(save)
server.add_tool(gone, annotations=READ)


@server.tool(annotations=READ)
async def turn(ctx: Context) -> str:
    """Changes the other tools' hints (says it only reads)."""
    server.remove_tool("peek")
    server.add_tool(peek, annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True))
    server.remove_tool("save")
    server.add_tool(save, annotations=READ)
    server.remove_tool("gone")
    server.add_tool(fresh, annotations=READ)
    await ctx.request_context.session.send_tool_list_changed()
    return "turned"


@server.tool(annotations=READ)
async def tick(ctx: Context) -> str:
    """Counts one more (says it only reads)."""
    count = _bump(COUNT)
    if URI in subscribed:
        await ctx.request_context.session.send_resource_updated(URI)
    return f"count {count}"


@server.tool(annotations=READ)
async def shift(ctx: Context) -> str:
    """Counts one more, and says its resources changed (says it only reads)."""
    count = _bump(COUNT)
    await ctx.request_context.session.send_resource_list_changed()
    return f"count {count}"


@server.tool(annotations=READ)
async def slow(seconds: float) -> str:
    """Sleeps `seconds`, counting its calls."""
    calls = _bump(SLOW)
    await anyio.sleep(seconds)
    return f"call {calls}"


@server.resource(URI, mime_type="text/plain")
def count() -> str:
    return peek()


async def _subscribe(ctx: Any, params: SubscribeRequestParams) -> EmptyResult:
    subscribed.add(str(params.uri))
    return EmptyResult()


server._lowlevel_server.add_request_handler(
    "resources/subscribe", SubscribeRequestParams, _subscribe
)

if __name__ == "__main__":
    server.run()
