"""An MCP server (the SDK's MCPServer, over stdio) that starts a daemon as it starts
(`daemonize.py`: fork, `setsid`, fork), its pid written to PIDFILE, then serves `ping` and
`hang` (a call that sleeps until the server is ended).

    python tests/daemon_mcp_server.py PIDFILE
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from daemonize import spawn_daemon
from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

server = MCPServer("daemon", version="1.0")
READ = ToolAnnotations(read_only_hint=True)


@server.tool(annotations=READ)
def ping() -> str:
    """Answers pong."""
    return "pong"


@server.tool(annotations=READ)
def hang(seconds: float) -> str:
    """Sleeps (a call in flight when the run is ended)."""
    Path(sys.argv[1] + ".turn").touch()
    time.sleep(seconds)
    return "woke"


if __name__ == "__main__":
    spawn_daemon(Path(sys.argv[1]))  # before the server's threads: a fork with one thread
    server.run()
