"""Turning one model reply into one validated Decision, or a message the model can fix."""

from __future__ import annotations

import json
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from loopdeck.core.model import ModelReply
from loopdeck.core.tools import ToolSpec

DecisionType = Literal["tool_call", "ask_user", "final", "handoff"]


class InvalidDecision(Exception):
    """The reply cannot be acted on; the message goes back to the model verbatim."""


class ToolCall(BaseModel):
    model_config = ConfigDict(frozen=True)

    provider_id: str | None
    tool: str
    args: dict[str, Any]


class Decision(BaseModel):
    model_config = ConfigDict(frozen=True)

    type: DecisionType
    calls: list[ToolCall] = Field(default_factory=list)
    message: str = ""
    reason_code: str = ""
    via: Literal["native", "envelope"] = "envelope"
    plan_step: int | None = None


class DecisionEnvelope(BaseModel):
    """The JSON object a model without native tool calls must return."""

    model_config = ConfigDict(extra="forbid")

    type: DecisionType
    tool_name: str | None = None
    arguments: dict[str, Any] | None = None
    message: str = ""
    reason_code: str = Field(min_length=1)
    plan_step: int | None = None


DECISION_SCHEMA_TEXT = (
    '{"type": "tool_call|ask_user|final|handoff", "tool_name": str|null, '
    '"arguments": object|null, "message": str, "reason_code": str, "plan_step": int|null}.'
)
ENVELOPE_INSTRUCTIONS = (
    "Answer with native tool calls, or with exactly one JSON object: " + DECISION_SCHEMA_TEXT
)


_STEP = re.compile(r"^\s*step\s+(\d+)", re.IGNORECASE)


def _declared_step(text: str | None) -> int | None:
    match = _STEP.match(text or "")
    return int(match.group(1)) if match else None


def _validated_args(tools: dict[str, ToolSpec], name: str, raw: Any) -> dict[str, Any]:
    spec = tools.get(name)
    if spec is None:
        known = ", ".join(sorted(tools)) or "(none)"
        raise InvalidDecision(f"unknown tool {name!r}; allowed tools: {known}")
    if isinstance(raw, str):
        try:
            raw = json.loads(raw or "{}")
        except json.JSONDecodeError as exc:
            raise InvalidDecision(f"arguments of {name} are not valid JSON: {exc}") from exc
    if not isinstance(raw, dict):
        raise InvalidDecision(f"arguments of {name} must be a JSON object")
    try:
        spec.args_model.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'arguments'}: {e['msg']}" for e in exc.errors()
        )
        raise InvalidDecision(f"arguments of {name} are invalid: {problems}") from exc
    return raw


def decide(reply: ModelReply, tools: dict[str, ToolSpec]) -> Decision:
    if reply.tool_calls:
        calls = [
            ToolCall(
                provider_id=raw.id,
                tool=raw.name,
                args=_validated_args(tools, raw.name, raw.arguments),
            )
            for raw in reply.tool_calls
        ]
        return Decision(
            type="tool_call",
            calls=calls,
            message=reply.content or "",
            reason_code="TOOL_CALL",
            via="native",
            plan_step=_declared_step(reply.content),
        )
    text = (reply.content or "").strip()
    if text.startswith("```"):
        text = text.strip("`").removeprefix("json").strip()
    try:
        envelope = DecisionEnvelope.model_validate_json(text)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "output"
        raise InvalidDecision(
            f"output is not a valid decision ({where}: {first['msg']}). {ENVELOPE_INSTRUCTIONS}"
        ) from exc
    if envelope.type != "tool_call":
        return Decision(
            type=envelope.type,
            message=envelope.message,
            reason_code=envelope.reason_code,
            plan_step=envelope.plan_step,
        )
    if not envelope.tool_name:
        raise InvalidDecision("a tool_call decision needs tool_name")
    args = _validated_args(tools, envelope.tool_name, envelope.arguments or {})
    call = ToolCall(provider_id=None, tool=envelope.tool_name, args=args)
    return Decision(
        type="tool_call",
        calls=[call],
        message=envelope.message,
        reason_code=envelope.reason_code,
        plan_step=envelope.plan_step,
    )
