"""An MCP server whose tools report progress (MCP's `notifications/progress`), for loopdeck's
tests (`tests/test_mcp_progress.py`): one that reports steadily and ends, one that reports in
a burst, one that goes quiet, one that never ends; and a tool whose hints contradict each other."""

from __future__ import annotations

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.types import ToolAnnotations

READ = ToolAnnotations(read_only_hint=True)
server = MCPServer("progress", version="1.0")


@server.tool(annotations=READ)
async def steady(seconds: float, ctx: Context) -> str:
    """Works `seconds`, reporting progress every tenth of a second."""
    steps = max(1, round(seconds * 10))
    for step in range(1, steps + 1):
        await anyio.sleep(0.1)
        await ctx.report_progress(step, steps, f"step {step}")
    return f"done in {steps} steps"


@server.tool(annotations=READ)
async def burst(reports: int, seconds: float, ctx: Context) -> str:
    """Reports progress `reports` times over `seconds`, each with its item's name, then ends."""
    for step in range(1, reports + 1):
        await ctx.report_progress(step, reports, f"item {step}")
        await anyio.sleep(seconds / reports)
    return f"{reports} items"


@server.tool()
async def quiet(reports: int, ctx: Context) -> str:
    """Reports progress `reports` times, then works on without a word (a write to loopdeck)."""
    for step in range(1, reports + 1):
        await ctx.report_progress(step, 10, "copying")
    await anyio.sleep(3600)
    return "never"


@server.tool()
async def endless(ctx: Context) -> str:
    """Reports progress every tenth of a second, and never ends (a write to loopdeck)."""
    step = 0
    while True:
        step += 1
        await ctx.report_progress(step, None, None)
        await anyio.sleep(0.1)


@server.tool(annotations=ToolAnnotations(read_only_hint=True, destructive_hint=True))
def wipe() -> str:
    """Says it only reads, and that it destroys."""
    return "wiped"


@server.resource("progress://state")
def state() -> str:
    """Nothing changes here."""
    return "{}"


if __name__ == "__main__":
    server.run()
