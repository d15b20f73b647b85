"""The `[mcp]` table of a `scenario.toml`, read only by the MCP kind: an env whose tools come
from an MCP server.

```toml
[mcp]
command = ["npx", "-y", "@modelcontextprotocol/server-filesystem", "{workdir}"]  # or url = …
env = { SOME_VAR = "value" }
startup_timeout_s = 30
snapshot = [ { resource = "file:///{workdir}/notes.md" },
             { tool = "list_directory", args = { path = "{workdir}" }, timeout_s = 10 } ]
state_changes = "any_time"   # the state changes on its own: read before every call
ping_interval_s = 5          # a server over HTTP (url): pinged this often, its end seen at once
progress_max_s = 600         # a call reporting progress: its timeout counts from its last report,
                             # up to this long from its start

[mcp.tools.write_file]
risk = "write"
exempt = false
timeout_s = 20
```

`{workdir}` (the run's working copy) is put in every value here, in `goal_check` and in the
string arguments of scripted calls (`workdir_in`); so are `{envdir}` (the env folder itself,
where a server's own code may live) and `{python}` (the interpreter loopdeck runs on, which
has the `mcp` SDK).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from loopdeck.core.envdir import EnvDir, workdir_in
from loopdeck.core.environment import StateChanges
from loopdeck.core.tools import Risk

TABLE = "mcp"


class SnapshotEntry(BaseModel):
    """One part of the goal-relevant state: a resource read, or a read tool called."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    resource: str | None = None
    tool: str | None = None
    args: dict[str, Any] = Field(default_factory=dict)
    # How long the server may take to answer; None: the tool's own, else `call_timeout_s`.
    timeout_s: float | None = Field(default=None, gt=0)

    @model_validator(mode="after")
    def _one(self) -> SnapshotEntry:
        if (self.resource is None) == (self.tool is None):
            raise ValueError("a snapshot entry is one of resource = URI or tool = NAME")
        return self


class ToolOverride(BaseModel):
    """What the scenario says of one server tool, over what the server's annotations say."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    risk: Risk | None = None
    exempt: bool | None = None
    timeout_s: float | None = Field(default=None, gt=0)


class McpConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    command: list[str] | None = Field(default=None, min_length=1)
    url: str | None = None
    env: dict[str, str] = Field(default_factory=dict)
    startup_timeout_s: float = Field(default=30.0, gt=0)
    # The state the guard keys on and receipts bind to; "none": not observed (the guard keys
    # on the count of executed writes). Required unless `env.py` gives `snapshot()`.
    snapshot: list[SnapshotEntry] | Literal["none"] | None = None
    # How that state changes (`core/state_reads.py`): "by_writes" (the MCP env's own default:
    # read again only after a tool the server does not mark read-only) or "any_time" (it
    # changes on its own: read on every look). None: the env's own (`env.py`'s class says).
    state_changes: StateChanges | None = None
    tools: dict[str, ToolOverride] = Field(default_factory=dict)
    call_timeout_s: float = Field(default=30.0, gt=0)  # a tool's timeout when none is set
    # A call that reports progress is given its timeout again at each report, up to this long
    # from its start (`progress.py`).
    progress_max_s: float = Field(default=600.0, gt=0)
    # A server over HTTP (`url`) has no process of loopdeck's to watch: it is pinged this
    # often, so its end stops the run at once, whatever the run waits for; a ping it does not
    # answer within the longest request timeout (`connection.ping_bound_s`) is its end too.
    # 0: never pinged (found at a request).
    ping_interval_s: float = Field(default=5.0, ge=0)

    @model_validator(mode="after")
    def _one_server(self) -> McpConfig:
        if (self.command is None) == (self.url is None):
            raise ValueError('[mcp] needs one of command = [...] or url = "http://…"')
        return self

    def in_workdir(self, workdir: Path, envdir: Path | None = None) -> McpConfig:
        """This config with `{workdir}`, `{envdir}` and `{python}` put in every value."""
        data = workdir_in(self.model_dump(), workdir, envdir)
        return McpConfig.model_validate(data)


def mcp_config(env_dir: EnvDir) -> McpConfig:
    """The env's `[mcp]`, checked."""
    return env_dir.table(TABLE, McpConfig)
