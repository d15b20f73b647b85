"""Plays a scenario script: which turn comes next is read off the conversation itself."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

from loopdeck.core.compaction import COMPACTED, dropped_turns
from loopdeck.core.prompts import ANSWER_SLOT, answer_slots_filled, last_answer
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


# The length of each tool call as JSON, by what it says: a conversation is resent whole on
# every turn, and serializing its old calls again made each turn cost more than the last.
_call_lengths: dict[tuple[Any, ...], int] = {}
_CALL_LENGTHS_KEPT = 100_000


def _calls_length(calls: list[Any]) -> int:
    """len(json.dumps(calls)); a call seen before (same id, tool and arguments) is not
    serialized again."""
    total = 2 + 2 * (len(calls) - 1)  # the list's brackets and separators
    for call in calls:
        try:
            function = call["function"]
            key = (call["id"], function["name"], function["arguments"])
            length = _call_lengths.get(key)
        except (TypeError, KeyError):  # not the shape the runtime sends (or unhashable)
            total += len(json.dumps(call))
            continue
        if length is None:
            if len(_call_lengths) >= _CALL_LENGTHS_KEPT:
                _call_lengths.clear()
            length = _call_lengths[key] = len(json.dumps(call))
        total += length
    return total


def prompt_tokens(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> int:
    """`count_tokens(prompt_text(...))` without building the text: the same figure."""
    return _prompt_tokens_and_turns(messages, tools)[0]


def _prompt_tokens_and_turns(
    messages: list[dict[str, Any]], tools: list[dict[str, Any]]
) -> tuple[int, int]:
    """The prompt's tokens, and how many turns the assistant has taken (its messages, and those
    a compaction's marker says were dropped): one pass over a conversation that is resent whole
    on every turn."""
    chars = 0
    turns = 0
    for message in messages:
        content = message.get("content")
        if content.__class__ is str:
            chars += len(content)
        elif content:
            chars += len(str(content))
        role = message.get("role")
        if role == "assistant":
            turns += 1
        elif role == "user" and content.__class__ is str and content.startswith(COMPACTED):
            turns += dropped_turns(message)  # turns compaction took out still happened
        calls = message.get("tool_calls")
        if calls:
            chars += _calls_length(calls) if isinstance(calls, list) else len(json.dumps(calls))
    if tools:
        chars += len(json.dumps(tools))
    return (max(1, math.ceil(chars / 4)) if chars else 0), turns


EXHAUSTED = ScriptTurn(final="(the script has no more turns)", reason_code="SCRIPT_EXHAUSTED")


def answered(value: Any, messages: list[dict[str, Any]]) -> Any:
    """`value` with `{answer}` in its strings replaced by the operator's latest answer (a
    script that asks, then acts on what it was told); unchanged when it names none."""
    if isinstance(value, str):
        if ANSWER_SLOT not in value:
            return value
        return answer_slots_filled(value, last_answer(messages))
    if isinstance(value, dict):
        return {k: answered(v, messages) for k, v in value.items()}
    if isinstance(value, list):
        return [answered(v, messages) for v in value]
    return value


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
    tokens, index = _prompt_tokens_and_turns(messages, tools)
    if role == "planner":
        plan = script.plan_for(round_no)
        return ScriptedReply(plan, [], tokens, count_tokens(plan))
    turn = next_turn(script.turns_for(None if react else round_no), index)
    if turn.tool is not None or turn.calls:
        wanted = [(turn.tool, turn.args)] if turn.tool is not None else []
        wanted += [(c.tool, c.args) for c in turn.calls or []]
        calls = [
            ScriptedCall(
                id=f"call_{round_no}_{index}" + (f"_{k}" if k else ""),
                name=name,
                arguments=json.dumps(answered(args or {}, messages)),
            )
            for k, (name, args) in enumerate(wanted)
        ]
        content = f"Step {turn.step}." if turn.step is not None else None
        said = "".join(c.name + c.arguments for c in calls)
        return ScriptedReply(content, calls, tokens, count_tokens(said))
    if turn.raw is not None:
        return ScriptedReply(turn.raw, [], tokens, count_tokens(turn.raw))
    kind, message = next(
        (k, v)
        for k, v in (("final", turn.final), ("ask_user", turn.ask_user), ("handoff", turn.handoff))
        if v is not None
    )
    said = answered(message, messages)
    envelope = json.dumps({"type": kind, "message": said, "reason_code": turn.reason_code})
    return ScriptedReply(envelope, [], tokens, count_tokens(envelope))
