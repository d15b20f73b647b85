"""`loopdeck gateway serve`: one gateway for agents started elsewhere, each client token
(`loopdeck gateway token`) one run. The first call with a token whose signature holds opens
its run (`start_run`, the caller's: a run recorded as any other), and waits for its door; a
token whose run has ended, or that is not signed with the user's key, is let in nowhere.

A served run has no agent process to watch: it ends when its agent has been quiet for
`idle_s` after an answer with no tool use, by a stop or a kill, or at a cap; then its goal
check decides, as for any gateway run.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from loopdeck.gateway.config import KEEPALIVE_S
from loopdeck.gateway.door import Door
from loopdeck.gateway.server import GatewayServer
from loopdeck.gateway.tokens import claims_of

# What the caller does with a token's settings: its run started (recorded, in a task),
# reached through `server`; done when the run is over.
StartRun = Callable[[dict[str, Any], str, GatewayServer], Awaitable[Any]]


class GatewayService:
    def __init__(self, key: bytes, start_run: StartRun, keepalive_s: float = KEEPALIVE_S):
        self.key = key
        self.start_run = start_run
        self.server = GatewayServer(keepalive_s)
        self.server.unknown_token = self._opened
        self.runs: dict[str, asyncio.Future[Any]] = {}  # token -> its run, once started

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        return await self.server.start(host, port)

    async def stop(self) -> None:
        await self.server.stop()

    async def _opened(self, token: str) -> Door | None:
        """The door of the token's run: opened now for a token not used before."""
        run = self.runs.get(token)
        if run is None:
            claims = claims_of(token, self.key)
            if claims is None:
                return None
            run = self.runs[token] = asyncio.ensure_future(
                self.start_run(claims, token, self.server)
            )
        return await self.server.door_opened(token, run)
