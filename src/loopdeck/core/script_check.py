"""A script checked against its env's tools before it is played: each call names a tool the env
has, with arguments its tool's model accepts, read as the runtime reads a model's reply
(`read_decision`). A turn marked `invalid = true` must be refused instead: it tests the
corrections path on purpose."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from loopdeck.core.decisions import InvalidDecision, read_decision
from loopdeck.core.model import ModelReply, RawToolCall
from loopdeck.core.prompts import ANSWER_SLOT
from loopdeck.core.scenario import ScenarioError, Script, ScriptTurn
from loopdeck.core.tools import ToolSpec


def _refusal(tools: Mapping[str, ToolSpec], tool: str, args: dict[str, Any] | None) -> str | None:
    """Why the runtime would refuse this call, or None if it would run it. Arguments that
    name the operator's answer (`{answer}`) are known only when played: the tool is checked."""
    if ANSWER_SLOT in json.dumps(args or {}, default=str):
        return None if tool in tools else f"unknown tool {tool!r}"
    try:
        arguments = json.dumps(args or {})
    except (TypeError, ValueError) as exc:  # a TOML date or time is no JSON value
        return f"the arguments of {tool} cannot be sent as JSON: {exc}"
    call = RawToolCall(id="check", name=tool, arguments=arguments)
    try:
        read_decision(ModelReply(model="scripted", tool_calls=[call]), dict(tools))
    except InvalidDecision as refused:
        return str(refused)
    return None


def _turn_problem(tools: Mapping[str, ToolSpec], turn: ScriptTurn) -> str | None:
    wanted = [(turn.tool, turn.args)] if turn.tool is not None else []
    wanted += [(c.tool, c.args) for c in turn.calls or []]
    refusals = [r for tool, args in wanted if (r := _refusal(tools, tool, args)) is not None]
    if turn.invalid:
        if refusals:
            return None
        return "marked invalid = true, but the runtime accepts it (drop the mark)"
    if refusals:
        return f"{refusals[0]} (if the model is meant to correct it, mark the turn invalid = true)"
    return None


def _turn_named(number: int, turn: ScriptTurn) -> str:
    said = [f"round {turn.round}"] if turn.round != 1 else []
    said += [f"step {turn.step}"] if turn.step is not None else []
    return f"executor turn {number}" + (f" ({', '.join(said)})" if said else "")


def check_script(
    scenario_file: Path, name: str, script: Script, tools: Mapping[str, ToolSpec]
) -> None:
    """Raises ScenarioError naming the script, its turn and why the runtime would refuse
    the turn's call (an unknown tool, arguments its model refuses)."""
    for number, turn in enumerate(script.executor, 1):
        problem = _turn_problem(tools, turn)
        if problem is not None:
            raise ScenarioError(
                f"{scenario_file}: script {name!r}, {_turn_named(number, turn)}: {problem}"
            )


def check_scripts(
    scenario_file: Path, scripts: Mapping[str, Script], tools: Mapping[str, ToolSpec]
) -> None:
    for name, script in sorted(scripts.items()):
        check_script(scenario_file, name, script, tools)
