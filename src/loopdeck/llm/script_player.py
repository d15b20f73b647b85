"""Plays a scenario script: which turn comes next is read off the conversation itself."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

from loopdeck.core.scenario import Script, ScriptTurn


@dataclass(frozen=True)
class ScriptedCall:
    id: str
    name: str
    arguments: str


@dataclass(frozen=True)
class ScriptedReply:
    content: str | None
    tool_calls: list[ScriptedCall] = field(default_factory=list)
    prompt_tokens: int = 0
    completion_tokens: int = 0


def count_tokens(text: str) -> int:
    """A deterministic stand-in for a tokenizer: one token per four characters."""
    return max(1, math.ceil(len(text) / 4)) if text else 0


def prompt_text(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> str:
    parts = [str(m.get("content") or "") for m in messages]
    parts += [json.dumps(m["tool_calls"]) for m in messages if m.get("tool_calls")]
    if tools:
        parts.append(json.dumps(tools))
    return "".join(parts)


EXHAUSTED = ScriptTurn(final="(the script has no more turns)", reason_code="SCRIPT_EXHAUSTED")


def next_turn(turns: list[ScriptTurn], index: int) -> ScriptTurn:
    if index < len(turns):
        return turns[index]
    if turns and turns[-1].repeat:
        return turns[-1]
    return EXHAUSTED


def play(
    script: Script,
    role: str,
    round_no: int,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]],
    react: bool,
) -> ScriptedReply:
    prompt_tokens = count_tokens(prompt_text(messages, tools))
    if role == "planner":
        plan = script.plan_for(round_no)
        return ScriptedReply(plan, [], prompt_tokens, count_tokens(plan))
    index = sum(1 for m in messages if m.get("role") == "assistant")
    turn = next_turn(script.turns_for(None if react else round_no), index)
    if turn.tool is not None:
        arguments = json.dumps(turn.args or {})
        call = ScriptedCall(id=f"call_{round_no}_{index}", name=turn.tool, arguments=arguments)
        content = f"Step {turn.step}." if turn.step is not None else None
        return ScriptedReply(content, [call], prompt_tokens, count_tokens(turn.tool + arguments))
    if turn.raw is not None:
        return ScriptedReply(turn.raw, [], prompt_tokens, count_tokens(turn.raw))
    kind, message = next(
        (k, v)
        for k, v in (("final", turn.final), ("ask_user", turn.ask_user), ("handoff", turn.handoff))
        if v is not None
    )
    envelope = json.dumps({"type": kind, "message": message, "reason_code": turn.reason_code})
    return ScriptedReply(envelope, [], prompt_tokens, count_tokens(envelope))
