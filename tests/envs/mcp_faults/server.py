"""An MCP server that fails the ways issue 36's MCP edges name, for tests/test_mcp_edges.py
(the SDK's server side, over stdio): it dies on SIGTERM saying so on stderr, writes lines
that are not JSON-RPC, offers a state of 1.1 MB, and has tools that are not read-only.
Its state is `state.json` in its working folder."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path
from types import FrameType

from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

STATE = Path("state.json")
READ = ToolAnnotations(read_only_hint=True)
DESTRUCTIVE = ToolAnnotations(read_only_hint=False, destructive_hint=True)
BIG_CHARS = 1_100_000
server = MCPServer("faults", version="1.0")
WIRE = os.dup(1)  # the client's pipe: the SDK points fd 1 at stderr once it serves


def _count() -> int:
    return int(json.loads(STATE.read_text())["count"]) if STATE.exists() else 0


def _set(count: int) -> None:
    STATE.write_text(json.dumps({"count": count}))


@server.tool(annotations=READ)
def peek() -> str:
    """The counter."""
    return str(_count())


@server.tool()
def bump(by: int) -> str:
    """Add `by` to the counter (no annotations: a write to loopdeck)."""
    _set(_count() + by)
    return f"count is {_count()}"


@server.tool(annotations=DESTRUCTIVE)
def erase() -> str:
    """Sets the counter back to 0."""
    _set(0)
    return "erased"


@server.tool()
def listing() -> str:
    """The counter, from a tool the server does not mark read-only."""
    return str(_count())


@server.tool(annotations=READ)
def stray() -> str:
    """Writes what is not JSON-RPC to the client before answering."""
    os.write(WIRE, b"this line is not json\n")
    os.write(WIRE, b'{"hello": "a JSON object that is no JSON-RPC message"}\n')
    os.write(WIRE, b'{"jsonrpc": "2.0", "method": "notifications/progress", "params": {}}\n')
    return "said"


@server.resource("faults://state", mime_type="application/json")
def state() -> str:
    """The counter, as JSON."""
    return json.dumps({"count": _count()})


@server.resource("faults://big", mime_type="text/plain")
def big() -> str:
    """1.1 MB of state; the counter is at its very end."""
    return "x" * BIG_CHARS + f" count={_count()}"


def _said_and_gone(signum: int, _frame: FrameType | None) -> None:
    print("faults server: stopped by a signal, state lost", file=sys.stderr, flush=True)
    os._exit(3)


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, _said_and_gone)
    server.run()
