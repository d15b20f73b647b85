"""loopdeck's own scripted ACP agent: an agent over stdio that plays a script of a
`scenario.toml` (`[[scripts.NAME.turns]]`, `acp_env/config.py`), so ACP runs, the demo
and the tests go offline against an agent that speaks the protocol like the real ones.

    python -m loopdeck.acp_env.scripted_agent SCENARIO_TOML SCRIPT_NAME

The i-th `session/prompt` plays the i-th turn (`scripted_steps.py`); a turn with
`repeat = true` is played again for every later prompt; with no turn left the agent says so
and ends the turn. Sessions start in mode `default` (asks before a tool with `permission`);
in mode `auto` it never asks. `session/cancel` ends the running turn `cancelled` at its next
step, unless the turn has `ignore_cancel`.

A script that is not there, or has no turns, is said on stderr and the process exits 2
before serving. Only `acp`, the stdlib and the scenario's models are imported: the agent
starts fast.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from acp import PROTOCOL_VERSION, RequestError, run_agent, update_agent_message_text
from acp.interfaces import Client
from acp.schema import (
    AgentCapabilities,
    Implementation,
    InitializeResponse,
    NewSessionResponse,
    PromptResponse,
    SessionMode,
    SessionModeState,
    SetSessionModeResponse,
    Usage,
)
from acp.stdio import stdio_streams

from loopdeck.acp_env.config import AgentTurn, agent_turns
from loopdeck.acp_env.scripted_steps import Session, TurnPlayer, turn_for
from loopdeck.core.scenario import ScenarioError, load_scenario

if TYPE_CHECKING:
    from acp import Agent

MODES = [
    SessionMode(id="default", name="Default", description="Asks before writing"),
    SessionMode(id="auto", name="Auto", description="Writes without asking"),
]
USAGE = "usage: python -m loopdeck.acp_env.scripted_agent SCENARIO_TOML SCRIPT_NAME"
NO_TURN_LEFT = "The script has no more turns: nothing left to do."


class ScriptedAgent:
    """The agent side of ACP, answering from a script. A plain class, not the SDK's
    `Agent` protocol: a method it lacks is answered "Method not found", where the
    protocol's inherited stubs would answer null."""

    def __init__(self, turns: list[AgentTurn], stdout: asyncio.StreamWriter) -> None:
        self.turns = turns
        self.stdout = stdout
        self.sessions: dict[str, Session] = {}
        self._client: Client | None = None

    def on_connect(self, conn: Client) -> None:
        self._client = conn

    def _connected(self) -> Client:
        if self._client is None:
            raise RequestError.internal_error({"reason": "not connected"})
        return self._client

    async def initialize(self, protocol_version: int, **kwargs: Any) -> InitializeResponse:
        return InitializeResponse(
            protocol_version=PROTOCOL_VERSION,
            agent_capabilities=AgentCapabilities(),
            agent_info=Implementation(name="loopdeck-scripted-agent", version="0.1.0"),
        )

    async def new_session(self, cwd: str, **kwargs: Any) -> NewSessionResponse:
        session_id = f"scripted-{len(self.sessions) + 1}"
        self.sessions[session_id] = Session(session_id, Path(cwd))
        return NewSessionResponse(
            session_id=session_id,
            modes=SessionModeState(current_mode_id="default", available_modes=MODES),
        )

    async def set_session_mode(
        self, session_id: str, mode_id: str, **kwargs: Any
    ) -> SetSessionModeResponse:
        session = self._session(session_id)
        known = [mode.id for mode in MODES]
        if mode_id not in known:
            raise RequestError.invalid_params(
                {"modeId": mode_id, "reason": f"unknown mode {mode_id!r}; modes: {known}"}
            )
        session.mode = mode_id
        return SetSessionModeResponse()

    async def cancel(self, session_id: str, **kwargs: Any) -> None:
        if session_id in self.sessions:
            self.sessions[session_id].cancelled.set()

    async def prompt(self, session_id: str, prompt: list[Any], **kwargs: Any) -> PromptResponse:
        session = self._session(session_id)
        turn = turn_for(self.turns, session.prompts)
        session.prompts += 1
        session.cancelled.clear()
        session.turn_tokens = None
        if turn is None:
            update = update_agent_message_text(NO_TURN_LEFT)
            await self._connected().session_update(session_id=session_id, update=update)
            return PromptResponse(stop_reason="end_turn")
        stop = await TurnPlayer(self._connected(), session, turn, self.stdout).play()
        spent = session.turn_tokens
        usage = None if spent is None else Usage(total_tokens=spent, input_tokens=spent,
                                                 output_tokens=0)  # fmt: skip
        return PromptResponse(stop_reason=stop, usage=usage)

    def _session(self, session_id: str) -> Session:
        if session_id not in self.sessions:
            raise RequestError.invalid_params(
                {"sessionId": session_id, "reason": "unknown session"}
            )
        return self.sessions[session_id]


def script_turns(path: Path, name: str) -> list[AgentTurn]:
    """The turns of `[scripts.NAME]`; a ScenarioError naming the file when there are none."""
    scenario = load_scenario(path)
    script = scenario.scripts.get(name)
    if script is None:
        names = ", ".join(sorted(scenario.scripts)) or "none"
        raise ScenarioError(f"{path}: no script {name!r} (its scripts: {names})")
    if not script.turns:
        raise ScenarioError(
            f"{path}: script {name!r} has no turns for an ACP agent ([[scripts.{name}.turns]])"
        )
    return agent_turns(path, name, script.turns)


async def serve(turns: list[AgentTurn]) -> None:
    reader, writer = await stdio_streams()
    agent = ScriptedAgent(turns, writer)
    await run_agent(cast("Agent", agent), input_stream=writer, output_stream=reader)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print(USAGE, file=sys.stderr)
        return 2
    try:
        turns = script_turns(Path(args[0]), args[1])
    except ScenarioError as exc:
        print(f"scripted agent: {exc}", file=sys.stderr)
        return 2
    asyncio.run(serve(turns))
    return 0


if __name__ == "__main__":
    sys.exit(main())
