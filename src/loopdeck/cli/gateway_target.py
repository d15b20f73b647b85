"""`loopdeck gateway`'s target: an agent's command on a folder in place (as `loopdeck acp`'s),
the gateway's upstream and its tools' risks; for a served run (`loopdeck gateway serve`), no
command, its client token and the server it is served by. Made here, read by the gateway kind
(`gateway/config.py`'s `GatewayTarget`), which nothing outside it imports.

Light at import: the class is made the first time it is asked for.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any, Literal

SERVED = "served"  # a served run's agent, started elsewhere


@functools.cache
def _target_class() -> type:
    from loopdeck.operator.launch import AcpTarget

    @dataclass(frozen=True)
    class GatewayTarget(AcpTarget):
        model: str = ""
        api_base: str | None = None
        tools: dict[str, Literal["read", "write"]] = field(default_factory=dict)
        token: str | None = None
        served_by: Any = None
        idle_s: float | None = None
        kind: str = "gateway"

        @property
        def env_name(self) -> str:
            """`gateway:NAME`, NAME the agent's (its command's program)."""
            from loopdeck.workdir.agent_command import command_name

            return f"gateway:{command_name(self.command) if self.command else SERVED}"

    return GatewayTarget


def gateway_target(**fields: Any) -> Any:
    return _target_class()(**fields)
