"""An MCP server (the SDK's MCPServer, over stdio) whose state reads fail the ways a real one's
can, for tests/test_mcp_state_failures.py: a read tool that raises, one that says `isError`
itself, one that hangs, and a resource that is there (`state://count`) beside one a template
serves (`state://item/{name}`). Its state is `count.txt` in its working folder.

    python tests/mcp_state_server.py
"""

from __future__ import annotations

import time
from pathlib import Path

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations

COUNT = Path("count.txt")
READ = ToolAnnotations(read_only_hint=True)
server = MCPServer("state", version="1.0")


def _count() -> int:
    return int(COUNT.read_text()) if COUNT.exists() else 0


@server.tool()
def bump(by: int) -> str:
    """Add `by` to the counter (no annotations: a write to loopdeck)."""
    COUNT.write_text(str(_count() + by))
    return f"count is {_count()}"


@server.tool(annotations=READ)
def count() -> str:
    """The counter."""
    return str(_count())


@server.tool(annotations=READ)
def read_state() -> str:
    """The counter, from a ledger that is locked: it raises."""
    raise RuntimeError("the ledger is locked by another process")


@server.tool(annotations=READ)
def refuse_state() -> str:
    """The counter, refused in the server's own words (a ToolError)."""
    raise ToolError("state is not available: maintenance until 14:00")


@server.tool(annotations=READ)
def slow_state(seconds: float) -> str:
    """The counter, after `seconds`."""
    time.sleep(seconds)
    return str(_count())


@server.resource("state://count", mime_type="text/plain")
def state() -> str:
    """The counter."""
    return str(_count())


@server.resource("state://item/{name}", mime_type="text/plain")
def item(name: str) -> str:
    """One named item (a template: listed as a template, not as a resource)."""
    return f"{name}={_count()}"


if __name__ == "__main__":
    server.run()
