"""`McpEnvironment`: an env whose tools are an MCP server's, supervised like any other.

Its tools come from `tools/list`: each an async loopdeck tool whose arguments model is the
server's JSON Schema (`schema_args.py`), whose risk is the server's annotation unless the
scenario overrides it (`readOnlyHint: true` → read; anything else → write, asked for), and
whose result is the server's content, normalized (`results.py`). Its state is the scenario's
`snapshot` entries, read through the server; its goal check the scenario's `goal_check`. The
state changes only by the tools the server does not mark read-only (`leaves_state`; a
scenario's override to `read` skips the approval, not the read after it), so it is read once
per change (`state_changes = "by_writes"`, `core/state_reads.py`), unless the scenario says it
changes on its own (`[mcp] state_changes = "any_time"`), or until the server says a resource
changed (`server_changes.py`). A tool the server makes less safe mid-run is a write from then
on (`tool_changes.py`).

An `env.py` may subclass it (`make_env(workdir, data)` returning one) to write `snapshot()`
or `unmet()` in Python; `self.read_resource(uri)` and `self.call_tool(name, args)` reach the
server from there.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from loopdeck.core.call_progress import progress_reporter
from loopdeck.core.control import StopRun
from loopdeck.core.environment import Environment, StateChanges
from loopdeck.core.finding_events import RiskRaised
from loopdeck.core.schema_args import args_model_for
from loopdeck.core.states import StopReason
from loopdeck.core.tools import Risk, ToolError, ToolSpec
from loopdeck.mcp_env.config import McpConfig, ToolOverride
from loopdeck.mcp_env.connection import McpConnection, ServerFailed
from loopdeck.mcp_env.listing import ServerTool
from loopdeck.mcp_env.results import call_result, resource_value
from loopdeck.mcp_env.server_asks import (
    offered_tools,
    override_problems,
    server_error,
    unanswered,
)
from loopdeck.mcp_env.state_entries import entry_problems, read_entry
from loopdeck.mcp_env.tool_changes import Specs, ToolChanges
from loopdeck.workdir.goal_check import run_goal_check

SNAPSHOT_TIMEOUT_S = 30.0
CALL_MARGIN_S = 2.0  # the runtime's bound on a call, past the call's own (`progress.py`)
NOT_OBSERVED = 'not observed (snapshot = "none"): the guard keys on the writes executed'


class Refused(ValueError):
    """What the server shows the scenario gets wrong: each `[mcp.tools.NAME]` naming no tool
    of its, each snapshot entry it cannot serve as state; all of them, so `run` and `check`
    say every one at once."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


class McpEnvironment(Environment):
    state_changes: StateChanges = "by_writes"

    def __init__(self, workdir: Path, data: dict[str, Any]) -> None:
        super().__init__(workdir, data)
        self.connection: McpConnection | None = None
        self.config: McpConfig | None = None
        self.goal_check: list[str] | None = None
        self.goal_check_timeout_s = 60.0
        self.writes_executed = 0
        self._specs: list[ToolSpec] = []
        self._timeouts: dict[str, float] = {}  # each tool's own (its spec's bounds it behind)
        self._read_only: set[str] = set()  # the tools the server marks readOnlyHint
        self._changes: ToolChanges | None = None  # its tools as it lists them again mid-run

    # -- the run's server ------------------------------------------------------------
    def connect(
        self, config: McpConfig, errlog: Path, goal_check: list[str] | None, check_s: float
    ) -> None:
        """Start the server and take its tools; `ServerFailed` names why it could not,
        `Refused` every override and snapshot entry the server shows to be wrong."""
        self.config, self.goal_check, self.goal_check_timeout_s = config, goal_check, check_s
        if config.state_changes is not None:
            self.state_changes = config.state_changes
        self.connection = McpConnection(config, self.workdir, errlog)
        self.connection.start()
        offered = offered_tools(self.connection)
        self._specs = [self._spec(tool) for tool in offered]
        self._read_only = {tool.name for tool in offered if tool.read_only is True}
        risks = {spec.name: spec.risk for spec in self._specs}
        connection = self.connection
        self._changes = ToolChanges(
            connection.name, offered, risks, connection.tools, connection.log.say, self._as_write
        )
        connection.changes.tools_told = self._changes.listed
        connection.changes.vet = self._changes.vet
        problems = override_problems(config, self.connection.tools)
        problems += entry_problems(self.connection, config, self._specs)
        if problems:
            raise Refused(problems)

    def watch(self, fail: Callable[[StopReason, str], None]) -> None:
        """The server that ends while the run waits (for an approval, a model, anything)
        stops it at once, `tool_failure`, naming it with its exit status: a write it waited
        to run is withdrawn, never left to be approved into a dead server."""
        if self.connection is not None:
            self.connection.when_gone(lambda said: fail(StopReason.TOOL_FAILURE, said))

    def report_findings(self, found: Callable[[str, RiskRaised | None], None]) -> None:
        """The server's log warnings (`server_log.py`), each a finding of the run: those it
        logged as it started, at once."""
        if self.connection is not None:
            self.connection.log.tell(found)

    def watch_tools(self, changed: Callable[[Specs], None]) -> None:
        """A tool its server makes less safe mid-run is a write from then on
        (`tool_changes.py`)."""
        if self._changes is not None:
            self._changes.watch(changed)

    def risk_raised_again(self, raised: RiskRaised) -> Specs:
        """A run rebuilt from its log: a tool its server had made a write made one again where
        its log's finding said so, whatever the server says now (`tool_changes.py`)."""
        return {} if self._changes is None else self._changes.made_again(raised)

    def watch_state(self, changed: Callable[[], None]) -> None:
        """A resource the server says changed (`notifications/resources/updated`, `list_changed`):
        the state is read again at the next look (`server_changes.py`)."""
        if self.connection is not None:
            self.connection.changes.state_told = changed

    def close(self) -> None:
        if self.connection is not None:
            self.connection.close()

    def reopen(self, run_id: str) -> None:
        """The run goes on in another worker. A server over HTTP (`url`) keeps its state
        itself: this worker connected to it as the lost one did, there is nothing to rebuild."""

    def not_reopenable(self) -> str | None:
        if type(self).reopen is not McpEnvironment.reopen:
            return None  # the env's own env.py knows where its server keeps the state
        if self.config is not None and self.config.url is not None:
            return None
        return (
            "its MCP server was started by its worker ([mcp] command): its state goes with"
            " that worker; a server over HTTP ([mcp] url) or an env.py with reopen(run_id) moves"
        )

    @property
    def _server(self) -> McpConnection:
        if self.connection is None:
            raise ServerFailed("the MCP server was never started")
        return self.connection

    # -- tools ---------------------------------------------------------------------------
    def tools(self) -> list[ToolSpec]:
        return list(self._specs)

    def leaves_state(self, spec: ToolSpec) -> bool:
        """True for a tool the server marks read-only and the scenario does not make a write:
        the state is not read again after it (`core/state_reads.py`)."""
        return spec.risk == "read" and spec.name in self._read_only

    def _spec(self, tool: ServerTool, made: tuple[Risk, str] | None = None) -> ToolSpec:
        """The tool's spec, its risk `made` (else by its hints and the scenario's override)."""
        assert self.config is not None
        override = self.config.tools.get(tool.name, ToolOverride())
        risk, source = made or risk_of(tool, override)
        timeout_s = override.timeout_s or self.config.call_timeout_s
        max_s = max(timeout_s, self.config.progress_max_s)
        self._timeouts[tool.name] = timeout_s
        return ToolSpec(
            name=tool.name,
            description=tool.description,
            args_model=args_model_for(tool.name, tool.input_schema),
            risk=risk,
            risk_source=source,
            # The call times itself by its progress (`progress.py`); this bounds it behind that.
            timeout_s=max_s + CALL_MARGIN_S,
            exempt_from_guard=bool(override.exempt),
            fn=self._caller(tool.name, risk, timeout_s, max_s),
        )

    def _as_write(self, tool: ServerTool, source: str) -> ToolSpec:
        """`tool`'s spec from now on: a write (its server made it less safe mid-run)."""
        spec = self._spec(tool, ("write", source))
        self._read_only.discard(tool.name)
        self._specs = [spec if each.name == tool.name else each for each in self._specs]
        return spec

    def _caller(
        self, name: str, risk: Risk, timeout_s: float, max_s: float
    ) -> Callable[[Any], Awaitable[Any]]:
        async def call(args: Any) -> Any:
            arguments = args.model_dump(mode="json")
            progress = progress_reporter()  # the call's, shown and recorded as it reports
            told = None if progress is None else progress.told
            try:
                result = await self._server.call(name, arguments, timeout_s, max_s, risk, told)
            except ServerFailed as failed:
                raise StopRun(StopReason.TOOL_FAILURE, str(failed)) from None
            except ToolError:
                raise  # timed by its progress: said in its words (`progress.py`)
            except Exception as exc:
                raise server_error(self._server, name, exc, timeout_s) from None
            try:
                data = call_result(result)  # raises ToolError when the server says isError
            except ToolError as error:
                raise unanswered(name, error.message) or error from None
            if risk == "write":
                self.writes_executed += 1
            return data

        return call

    def call_tool(self, name: str, args: dict[str, Any], timeout_s: float | None = None) -> Any:
        """A tool called from env code on the env thread (a Python `snapshot()`): its data
        (`ToolError` when the server says `isError`), within `timeout_s` (None: the tool's own).
        The server gone stops the run `tool_failure`, naming it."""
        wait_s = timeout_s or self._timeouts.get(name, SNAPSHOT_TIMEOUT_S)
        try:
            return call_result(self._server.call_sync(name, args, wait_s))
        except ServerFailed as failed:
            raise StopRun(StopReason.TOOL_FAILURE, str(failed)) from None

    def read_resource(self, uri: str, timeout_s: float | None = None) -> Any:
        """A resource read from env code on the env thread: its text (or a blob's digest),
        within `timeout_s` (None: `call_timeout_s`). The server gone stops the run
        `tool_failure`, naming it."""
        wait_s = timeout_s or (self.config.call_timeout_s if self.config else SNAPSHOT_TIMEOUT_S)
        try:
            return resource_value(self._server.read_sync(uri, wait_s))
        except ServerFailed as failed:
            raise StopRun(StopReason.TOOL_FAILURE, str(failed)) from None

    # -- state and goal ------------------------------------------------------------------
    def snapshot(self) -> dict[str, Any]:
        """The entries' parts of the state, each within its timeout; one that fails stops the
        run `tool_failure` naming it and what the server said (`state_entries.py`)."""
        config = self.config
        assert config is not None
        entries = config.snapshot
        if entries is None or entries == "none":
            return {"writes_executed": self.writes_executed}
        server = self._server
        return {"state": [read_entry(server, config, n, e) for n, e in enumerate(entries, 1)]}

    def unmet(self, snapshot: dict[str, Any]) -> list[str]:
        if self.goal_check is None:
            raise StopRun(StopReason.TOOL_FAILURE, "this MCP env has no goal_check")
        return run_goal_check(self.goal_check, self.workdir, self.goal_check_timeout_s)

    @property
    def observed(self) -> str:
        """How this env's state is observed, for the console's words."""
        entries = self.config.snapshot if self.config else None
        if entries is None or entries == "none":
            return NOT_OBSERVED
        return f"{len(entries)} snapshot entr{'y' if len(entries) == 1 else 'ies'}"


def risk_of(tool: ServerTool, override: ToolOverride) -> tuple[Risk, str]:
    """The tool's risk and where it came from, in words the console shows."""
    if override.risk is not None:
        return override.risk, "scenario override"
    if tool.read_only is True and tool.destructive is True:
        return "write", "server says read-only and destructive: treated as write"
    if tool.read_only is True:
        return "read", "server says read-only"
    if tool.read_only is None and tool.destructive is None:
        return "write", "no annotation: treated as write"
    return "write", "server says it writes"
