"""What a server asks of loopdeck beyond its tools, and the tools loopdeck cannot offer.

- A scenario's `[mcp.tools.NAME]` naming no tool of the server refuses the run before it
  starts (`override_problems`: said as the scenario's error, exit 2, in `run` and `check`),
  naming the server's tools closest to it: an override left unused would leave the tool it
  meant ungated.
- A tool the server marks `execution.taskSupport = "required"` runs only as an MCP task,
  which loopdeck does not do: it is left out of the tools offered, said once as the run
  starts (a warning on `loopdeck.mcp`).
- A server that asks, during a tool, for the user's input (elicitation), loopdeck's model
  (sampling) or the client's roots is refused by the SDK (loopdeck declares none of these
  capabilities); the call is the tool's error saying so, never a crash of loopdeck's.
- Any other protocol error of a call is a crash of the call in the server's words (a
  write's outcome is then unknown), never loopdeck's file and line.
"""

from __future__ import annotations

import difflib

from loopdeck.core.tools import ErrorCode, ToolError
from loopdeck.mcp_env.config import McpConfig
from loopdeck.mcp_env.connection import REQUEST_TIMEOUT, McpConnection
from loopdeck.mcp_env.listing import ServerTool
from loopdeck.mcp_env.sdk_noise import log

CLOSEST_SHOWN = 3
LISTED_SHOWN = 12
# The SDK's words for a server's request it has no callback for (mcp 2.3's defaults), and
# what the server asked for, in the operator's words.
UNANSWERED = {
    "Elicitation not supported": "input from the user (elicitation)",
    "Sampling not supported": "a completion from the client's model (sampling)",
    "List roots not supported": "the client's roots (roots/list)",
}


def override_problems(config: McpConfig, tools: list[ServerTool]) -> list[str]:
    """Each `[mcp.tools.NAME]` that names no tool the server lists, in words: the run is
    refused."""
    names = [tool.name for tool in tools]
    problems = []
    for name in config.tools:
        if name in names:
            continue
        closest = difflib.get_close_matches(name, names, CLOSEST_SHOWN, 0.5)
        if closest:
            hint = f"did you mean {' or '.join(closest)}?"
        else:
            listed = ", ".join(names[:LISTED_SHOWN]) + (", …" if len(names) > LISTED_SHOWN else "")
            hint = f"it lists {listed or 'no tools'}"
        problems.append(
            f"[mcp.tools.{name}]: the server has no tool {name}, so this override would"
            f" apply to nothing; {hint}"
        )
    return problems


def offered_tools(server: McpConnection) -> list[ServerTool]:
    """The server's tools loopdeck can call: those that need an MCP task are left out,
    said once."""
    needs_task = [tool.name for tool in server.tools if tool.task_support == "required"]
    if needs_task:
        log.warning(
            "MCP server `%s`: %s left out of the tools offered to the model: %s only as an"
            ' MCP task (execution.taskSupport = "required"), which loopdeck does not run',
            server.name,
            ", ".join(needs_task),
            "it runs" if len(needs_task) == 1 else "they run",
        )
    return [tool for tool in server.tools if tool.task_support != "required"]


def unanswered(tool: str, words: str) -> ToolError | None:
    """The tool's error when the server's words say it asked what loopdeck does not answer."""
    for sdk_words, asked in UNANSWERED.items():
        if sdk_words.lower() in words.lower():
            return ToolError(
                ErrorCode.TOOL_ERROR,
                f"{tool}: the server asked the client for {asked} during the call, and"
                " loopdeck does not answer elicitation, sampling or roots requests (README:"
                f" An MCP server as the environment); the server said: {words}",
            )
    return None


def server_error(server: McpConnection, tool: str, exc: Exception, timeout_s: float) -> Exception:
    """A call's protocol error (the server gone is `ServerFailed`, said by the connection)."""
    from mcp.shared.exceptions import MCPError

    if not isinstance(exc, MCPError):
        return RuntimeError(f"MCP error from {tool}: {exc}")
    if exc.error.code == REQUEST_TIMEOUT:  # the SDK's own timeout (the dispatcher's first)
        return TimeoutError(f"{tool}: the server did not answer in time")
    said = server.request_failed(exc, timeout_s)
    return unanswered(tool, said) or ToolError(ErrorCode.TOOL_CRASHED, f"{tool}: {said}")
