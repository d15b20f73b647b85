"""What a gateway run is given, from either door: an env folder's `[gateway]` table (read only
here) or `loopdeck gateway`'s target (the user's folder in place, `--tool`, `--model`).

```toml
[gateway]
agent = ["claude", "-p", "Fix calc.py so the tests pass", "--permission-mode", "bypassPermissions"]
model = "anthropic/claude-sonnet-4-5"   # the upstream, a LiteLLM model name (else `model`)
api_base = "http://127.0.0.1:8080"      # optional, as `loopdeck run --api-base`
env = { HOME = "${HOME}" }              # added to the agent's environment

[gateway.tools.Bash]
risk = "read"                            # this env's Bash only reads (its image is read-only)
```
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

from loopdeck.core.envdir import EnvDir
from loopdeck.gateway.tool_risk import FLAG, SCENARIO, Risk, ToolRisks

TABLE = "gateway"
# Set for the agent by the gateway, never by `--env`: its door and its run's token.
AGENT_DOOR = (
    "OPENAI_BASE_URL", "OPENAI_API_KEY", "ANTHROPIC_BASE_URL", "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
)  # fmt: skip
KEEPALIVE_S = 10.0
GRACE_S = 5.0
IDLE_S = 60.0  # a served run's agent this long quiet after an answer with no tool use: ended
UPSTREAM_TIMEOUT_S = 600.0  # a whole answer, never streamed, of a long model turn
# Times one call of the agent's may be asked again to tell the model that every tool use of its
# answer was taken out (rejected, a repeat): a model that proposes only what is refused, again
# and again, then reaches the agent with the reasons as text.
RETELLS = 3


class ToolSaid(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    risk: Literal["read", "write"]


class GatewayConfig(BaseModel):
    """`[gateway]`: the agent's command, its upstream, and what its tools risk."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    agent: list[str] = Field(min_length=1)
    model: str | None = None
    api_base: str | None = None
    env: dict[str, str] = Field(default_factory=dict)
    tools: dict[str, ToolSaid] = Field(default_factory=dict)
    # Fields of the agent's tool input it renews per call, beyond those left out by rule.
    volatile: list[str] = Field(default_factory=list)
    keepalive_s: float = Field(default=KEEPALIVE_S, gt=0)
    grace_s: float = Field(default=GRACE_S, gt=0)
    upstream_timeout_s: float = Field(default=UPSTREAM_TIMEOUT_S, gt=0)


class GatewayTarget(Protocol):
    """`loopdeck gateway`'s target, as the CLI makes it: the kind reads only these."""

    goal: str
    workdir: Path
    command: list[str]
    check: list[str] | None
    env: dict[str, str]
    model: str
    api_base: str | None
    tools: dict[str, Risk]
    token: str | None  # a served run's client token (`loopdeck gateway serve`); None: its own
    served_by: Any  # ... and the server it is served by (`gateway/server.GatewayServer`)
    idle_s: float | None  # ... and how long its agent may be quiet before it ends


@dataclass(frozen=True)
class GatewaySettings:
    """One gateway run's settings, whichever door it came by."""

    command: list[str]
    model: str
    api_base: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    risks: ToolRisks = field(default_factory=ToolRisks)
    volatile: frozenset[str] = frozenset()
    keepalive_s: float = KEEPALIVE_S
    grace_s: float = GRACE_S
    upstream_timeout_s: float = UPSTREAM_TIMEOUT_S
    idle_s: float = IDLE_S

    def __post_init__(self) -> None:
        if taken := sorted(set(self.env) & set(AGENT_DOOR)):
            raise ValueError(
                f"{', '.join(taken)}: set by the gateway for the agent (its door and this run's"
                " token), never by --env or [gateway] env"
            )


def gateway_config(env_dir: EnvDir) -> GatewayConfig:
    return env_dir.table(TABLE, GatewayConfig)


def upstream_of(env_dir: EnvDir) -> str:
    """An env folder's upstream: `[gateway] model`, else the scenario's `model`."""
    return gateway_config(env_dir).model or env_dir.scenario.model


def settings_of_env(env_dir: EnvDir, command: list[str]) -> GatewaySettings:
    """An env folder's `[gateway]` (its command with `{workdir}` and the like put in)."""
    config = gateway_config(env_dir)
    model = upstream_of(env_dir)
    risks = {name: said.risk for name, said in config.tools.items()}
    return GatewaySettings(
        command=command, model=model, api_base=config.api_base, env=dict(config.env),
        risks=ToolRisks(risks, SCENARIO), volatile=frozenset(config.volatile),
        keepalive_s=config.keepalive_s, grace_s=config.grace_s,
        upstream_timeout_s=config.upstream_timeout_s,
    )  # fmt: skip


def settings_of_target(target: GatewayTarget) -> GatewaySettings:
    return GatewaySettings(
        command=list(target.command), model=target.model, api_base=target.api_base,
        env=dict(target.env), risks=ToolRisks(dict(target.tools), FLAG),
        idle_s=target.idle_s or IDLE_S,
    )  # fmt: skip
