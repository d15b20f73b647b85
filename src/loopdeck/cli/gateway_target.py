"""`loopdeck gateway`'s target: an agent's command on a folder in place (as `loopdeck acp`'s),
the gateway's upstream and its tools' risks; for a served run (`loopdeck gateway serve`), no
command, its client token and the server it is served by. Made here, read by the gateway kind
(`gateway/config.py`'s `GatewayTarget`), which nothing outside it imports; launched as any
target (`core.run_kind.Target`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from loopdeck.workdir.agent_command import command_name

SERVED = "served"  # a served run's agent, started elsewhere


@dataclass(frozen=True)
class GatewayTarget:
    goal: str
    workdir: Path
    command: list[str]  # the agent's, run without a shell; [] for a served run
    model: str  # the upstream, a LiteLLM model name
    check: list[str] | None = None  # the goal check (exit 0: met); None: the operator judges
    env: dict[str, str] = field(default_factory=dict)  # added to the agent's; `${VAR}` allowed
    api_base: str | None = None
    tools: dict[str, Literal["read", "write"]] = field(default_factory=dict)
    token: str | None = None  # a served run's client token
    served_by: Any = None  # ... the server it is served by (`gateway/server.GatewayServer`)
    idle_s: float | None = None  # ... how long its agent may be quiet before the run ends
    kind: str = "gateway"

    @property
    def env_name(self) -> str:
        """`gateway:NAME`, NAME the agent's (its command's program)."""
        return f"gateway:{command_name(self.command) if self.command else SERVED}"
