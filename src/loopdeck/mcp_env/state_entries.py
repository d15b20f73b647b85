"""The `[mcp] snapshot` entries: the state the guard keys on and receipts bind to, read through
the server, each within its own timeout (the entry's `timeout_s`, else its tool's own, else
`call_timeout_s`).

An entry that fails (the server's error, a tool's `isError`, no answer in time) stops the run
`tool_failure`, naming the entry and what the server said, with its stderr's tail: the server
failed, as a goal check's command can, while loopdeck and its runner are well (`crashed` says
a runner is gone). A server gone is said as for any call to it.

Before the run, an entry refuses it (`entry_problems`: said as the scenario's error, exit 2) when
it names a tool the server lacks, one it runs only as an MCP task, or one that is not
read-only (an entry runs before every call, unasked, even when every write is denied), or a
resource the server neither lists nor serves.
"""

from __future__ import annotations

from typing import Any

from loopdeck.core.control import StopRun
from loopdeck.core.states import StopReason
from loopdeck.core.tools import ToolError, ToolSpec
from loopdeck.mcp_env.config import McpConfig, SnapshotEntry
from loopdeck.mcp_env.connection import McpConnection, ServerFailed
from loopdeck.mcp_env.results import call_result, resource_value

LISTED_SHOWN = 8  # the resources a refusal names


def named(number: int, entry: SnapshotEntry) -> str:
    what = f'tool = "{entry.tool}"' if entry.tool is not None else f'resource = "{entry.resource}"'
    return f"[mcp] snapshot entry {number} ({what})"


def timeout_of(entry: SnapshotEntry, config: McpConfig) -> float:
    if entry.timeout_s is not None:
        return entry.timeout_s
    override = config.tools.get(entry.tool) if entry.tool is not None else None
    if override is not None and override.timeout_s is not None:
        return override.timeout_s
    return config.call_timeout_s


def read_entry(
    server: McpConnection, config: McpConfig, number: int, entry: SnapshotEntry
) -> dict[str, Any]:
    """One entry's part of the state, on the env thread; its failure a `tool_failure` stop."""
    from mcp.shared.exceptions import MCPError

    timeout_s = timeout_of(entry, config)
    try:
        if entry.resource is not None:
            read = server.read_sync(entry.resource, timeout_s)
            return {"resource": entry.resource, "value": resource_value(read)}
        assert entry.tool is not None
        called = server.call_sync(entry.tool, entry.args, timeout_s)
        return {"tool": entry.tool, "value": call_result(called, state=True)}
    except ServerFailed as failed:
        raise StopRun(StopReason.TOOL_FAILURE, str(failed)) from None
    except (ToolError, TimeoutError, MCPError) as exc:
        said = server.with_stderr(server.request_failed(exc, timeout_s))
        raise StopRun(StopReason.TOOL_FAILURE, f"{named(number, entry)} failed: {said}") from None


def entry_problems(server: McpConnection, config: McpConfig, specs: list[ToolSpec]) -> list[str]:
    """Each entry the server refuses before the run (see above), in words."""
    if not isinstance(config.snapshot, list):
        return []
    risks = {spec.name: spec for spec in specs}
    tasks = {tool.name for tool in server.tools if tool.task_support == "required"}
    problems = []
    for number, entry in enumerate(config.snapshot, 1):
        if entry.tool is not None and entry.tool in tasks:
            problem: str | None = (
                f"{named(number, entry)}: the server runs {entry.tool} only as an MCP task"
                ' (execution.taskSupport = "required"), which loopdeck does not run'
            )
        elif entry.tool is not None:
            problem = _tool_problem(named(number, entry), entry.tool, risks.get(entry.tool))
        else:
            problem = _resource_problem(server, config, number, entry)
        problems += [problem] if problem is not None else []
    return problems


def _tool_problem(named: str, tool: str, spec: ToolSpec | None) -> str | None:
    if spec is None:
        return f"{named}: the server has no tool {tool}"
    if spec.risk != "read":
        return (
            f"{named} is not read-only ({spec.risk_source}): a snapshot entry runs before"
            " every call, even when writes are denied. Name a resource or a read-only tool,"
            f' or, if it only reads, say so: [mcp.tools.{tool}] risk = "read"'
        )
    return None


def _resource_problem(
    server: McpConnection, config: McpConfig, number: int, entry: SnapshotEntry
) -> str | None:
    """A resource the server lists is taken; one it does not (a template's, one it serves
    unlisted) is read once: a refusal refuses the run."""
    from mcp.shared.exceptions import MCPError

    assert entry.resource is not None
    if entry.resource in server.resources:
        return None
    timeout_s = timeout_of(entry, config)
    try:
        server.read_sync(entry.resource, timeout_s)
    except (ToolError, TimeoutError, MCPError) as exc:
        listed = server.resources[:LISTED_SHOWN]
        lists = ", ".join(listed) + (", …" if len(server.resources) > len(listed) else "")
        return (
            f"{named(number, entry)}: the server cannot read it: "
            f"{server.request_failed(exc, timeout_s)}; it lists {lists or 'no resources'}"
        )
    return None
