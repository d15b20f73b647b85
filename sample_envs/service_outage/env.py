"""service_outage: the orders service is down because db_url points at a retired database.

restart_service always answers "restart ok" and changes nothing the goal can see: it is the
tool that succeeds while nothing moves. watch_rollout is a slow read (it waits as long as it
is asked to): the time to try `s` (stop after it) and `k` (kill now). Copy this folder to make
an env of your own.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from loopdeck.core import Environment, ErrorCode, ToolError, tool


class SetConfigArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    key: str = Field(description="the configuration key, e.g. db_url")
    value: str


class ScaleArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    replicas: int = Field(ge=0, le=20)


class WatchArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    seconds: int = Field(ge=1, le=60, description="how long to watch")


class ServiceOutage(Environment):
    def __init__(self, workdir: Path, data: dict[str, Any]) -> None:
        super().__init__(workdir, data)
        self.config = {"db_url": data["initial_db_url"], "log_level": "info"}
        self.replicas = int(data["initial_replicas"])
        self.live_db_url = data["live_db_url"]
        self.restarts = 0  # deliberately outside snapshot(): it changes on every restart

    @property
    def healthy(self) -> bool:
        return self.config["db_url"] == self.live_db_url and self.replicas > 0

    def snapshot(self) -> dict[str, Any]:
        return {"db_url": self.config["db_url"], "replicas": self.replicas, "healthy": self.healthy}

    def unmet(self, snapshot: dict[str, Any]) -> list[str]:
        reasons = []
        if not snapshot["healthy"]:
            reasons.append(f"service unhealthy with db_url={snapshot['db_url']}")
        if snapshot["replicas"] != 3:
            reasons.append(f"replicas={snapshot['replicas']}, the goal needs 3")
        return reasons

    @tool()
    def get_status(self, args: BaseModel) -> dict[str, Any]:
        """Health, replica count, configuration and the last error of the orders service."""
        last_error = None
        if not self.healthy:
            last_error = (
                f"connection refused: {self.config['db_url']} is decommissioned; "
                f"the orders database now lives at {self.live_db_url}"
            )
        return {
            "healthy": self.healthy,
            "replicas": self.replicas,
            "config": dict(self.config),
            "last_error": last_error,
        }

    @tool(args=WatchArgs, timeout_s=90)
    async def watch_rollout(self, args: WatchArgs) -> dict[str, Any]:
        """Watch the service's rollout for some seconds; says what it saw."""
        await asyncio.sleep(args.seconds)
        return {"watched_s": args.seconds, "healthy": self.healthy, "replicas": self.replicas}

    @tool(risk="write")
    def restart_service(self, args: BaseModel) -> dict[str, Any]:
        """Restart the orders service."""
        self.restarts += 1
        return {"message": "restart ok"}

    @tool(args=SetConfigArgs, risk="write")
    def set_config(self, args: SetConfigArgs) -> dict[str, Any]:
        """Set one configuration key of the orders service."""
        if args.key not in self.config:
            raise ToolError(
                ErrorCode.NOT_FOUND, f"no config key {args.key!r}; keys: {sorted(self.config)}"
            )
        self.config[args.key] = args.value
        return {"key": args.key, "value": args.value}

    @tool(args=ScaleArgs, risk="write")
    def scale_service(self, args: ScaleArgs) -> dict[str, Any]:
        """Set the number of replicas of the orders service."""
        self.replicas = args.replicas
        return {"replicas": self.replicas}


def make_env(workdir: Path, data: dict[str, Any]) -> Environment:
    return ServiceOutage(workdir, data)
