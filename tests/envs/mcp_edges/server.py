"""An MCP server that misbehaves the ways servers do, for loopdeck's tests (the SDK's server
side, over stdio). Its state is `state.json` in its working folder."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations

STATE = Path("state.json")
READ = ToolAnnotations(read_only_hint=True)
server = MCPServer("edges", version="1.0")


def _state() -> dict[str, object]:
    return dict(json.loads(STATE.read_text())) if STATE.exists() else {"count": 0}


@server.tool(annotations=READ)
def peek() -> str:
    """The counter."""
    return str(_state()["count"])


@server.tool()
def bump(by: int) -> str:
    """Add `by` to the counter (no annotations: a write to loopdeck)."""
    state = _state()
    state["count"] = int(str(state["count"])) + by
    STATE.write_text(json.dumps(state))
    return f"count is {state['count']}"


@server.tool(annotations=READ)
def touch_log() -> str:
    """Writes a line to a log file that is not part of the state (read-only to the goal)."""
    with open("log.txt", "a") as log:
        log.write("touched\n")
    return "touched"


@server.tool(annotations=READ)
def fail() -> str:
    """Always fails, in words the model can read."""
    raise ToolError("the widget is jammed")


@server.tool(annotations=READ)
def hang(seconds: float) -> str:
    """Sleeps (a server that stops answering)."""
    time.sleep(seconds)
    return "woke"


@server.tool(annotations=READ)
def die() -> str:
    """The server crashes mid-call."""
    print("edges server: fatal: out of widgets", file=sys.stderr, flush=True)
    os._exit(3)


@server.tool(annotations=READ)
def huge() -> str:
    """Ten megabytes of text."""
    return "x" * 10_000_000


@server.resource("edges://state", mime_type="application/json")
def state() -> str:
    """The counter, as JSON."""
    return json.dumps(_state(), sort_keys=True)


if __name__ == "__main__":
    server.run()
