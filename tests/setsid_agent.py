"""A tiny ACP agent that starts a daemon (`daemonize.py`: fork, `setsid`, fork) as it starts,
its pid written to PIDFILE, then behaves: each prompt ends its turn at once, or with `hang`
waits until cancelled (having touched PIDFILE.turn, so a test knows the turn is on); with
`terminal` it first asks loopdeck for a terminal running `daemonize.py PIDFILE.term sleep`
(a command that starts a daemon of its own).

    python tests/setsid_agent.py PIDFILE [hang] [terminal]
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any, cast

from acp import PROTOCOL_VERSION, Agent, run_agent
from acp.schema import (
    AgentCapabilities,
    Implementation,
    InitializeResponse,
    NewSessionResponse,
    PromptResponse,
)
from acp.stdio import stdio_streams
from daemonize import spawn_daemon


class SetsidAgent:
    def __init__(self, pidfile: Path, hang: bool, terminal: bool) -> None:
        self.pidfile = pidfile
        self.hang = hang
        self.terminal = terminal
        self.cancelled = asyncio.Event()

    def on_connect(self, conn: Any) -> None:
        self.conn = conn

    async def initialize(self, protocol_version: int, **kwargs: Any) -> InitializeResponse:
        return InitializeResponse(
            protocol_version=PROTOCOL_VERSION,
            agent_capabilities=AgentCapabilities(),
            agent_info=Implementation(name="setsid-agent", version="0"),
        )

    async def new_session(self, cwd: str, **kwargs: Any) -> NewSessionResponse:
        return NewSessionResponse(session_id="setsid-1")

    async def cancel(self, session_id: str, **kwargs: Any) -> None:
        self.cancelled.set()

    async def prompt(self, session_id: str, prompt: list[Any], **kwargs: Any) -> PromptResponse:
        if self.terminal:
            daemonize = str(Path(__file__).with_name("daemonize.py"))
            term = str(self.pidfile) + ".term"
            await self.conn.create_terminal(
                session_id=session_id, command=sys.executable, args=[daemonize, term, "sleep"]
            )
        if not self.hang:
            return PromptResponse(stop_reason="end_turn")
        self.pidfile.with_name(self.pidfile.name + ".turn").touch()
        self.cancelled.clear()
        await self.cancelled.wait()
        return PromptResponse(stop_reason="cancelled")


async def serve(agent: SetsidAgent) -> None:
    reader, writer = await stdio_streams()
    await run_agent(cast(Agent, agent), input_stream=writer, output_stream=reader)


if __name__ == "__main__":
    pidfile = Path(sys.argv[1])
    spawn_daemon(pidfile)  # before the event loop: a fork with one thread
    said = sys.argv[2:]
    asyncio.run(serve(SetsidAgent(pidfile, hang="hang" in said, terminal="terminal" in said)))
