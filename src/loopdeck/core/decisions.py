"""Turning one model reply into one validated Decision (what the model proposes: tool calls,
a question, a final answer or a handoff), or a message the model can fix."""

from __future__ import annotations

import json
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from loopdeck.core.canonical import NotCanonical, canonical_args, normalized
from loopdeck.core.model import ModelReply
from loopdeck.core.text import capped, escape_surrogates
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

    @field_validator("message", "reason_code")
    @classmethod
    def _storable(cls, text: str) -> str:
        return escape_surrogates(text)


class DecisionEnvelope(BaseModel):
    """The JSON object a model without native tool calls must return."""

    model_config = ConfigDict(extra="forbid")

    type: DecisionType
    tool_name: str | None = None
    arguments: dict[str, Any] | None = None
    message: str = ""
    reason_code: str = Field(min_length=1, max_length=200)
    plan_step: int | None = Field(default=None, ge=0, le=10_000)


DECISION_SCHEMA_TEXT = (
    '{"type": "tool_call|ask_user|final|handoff", "tool_name": str|null, '
    '"arguments": object|null, "message": str, "reason_code": str, "plan_step": int|null}.'
)
ENVELOPE_INSTRUCTIONS = (
    "Answer with native tool calls, or with exactly one JSON object: " + DECISION_SCHEMA_TEXT
)


# Bounds on what the parser reads: generous for real payloads, finite for hostile ones.
MAX_ARGUMENTS_CHARS = 4_000_000
MAX_ENVELOPE_CHARS = 4_000_000
MAX_TOOL_CALLS = 64
MAX_PLAN_STEP = 10_000
PROBLEM_CAP = 2_000

_STEP = re.compile(r"^\s*step\s+(\d{1,6})\b", re.IGNORECASE)


def _declared_step(text: str | None) -> int | None:
    match = _STEP.match(text or "")
    if match is None:
        return None
    step = int(match.group(1))
    return step if step <= MAX_PLAN_STEP else None


def _name(name: str) -> str:
    return repr(capped(escape_surrogates(name), 80))


def _validated_args(tools: dict[str, ToolSpec], name: str, raw: Any) -> dict[str, Any]:
    spec = tools.get(name)
    if spec is None:
        known = ", ".join(sorted(tools)) or "(none)"
        raise InvalidDecision(f"unknown tool {_name(name)}; allowed tools: {known}")
    if isinstance(raw, str):
        if len(raw) > MAX_ARGUMENTS_CHARS:
            raise InvalidDecision(
                f"arguments of {name} are {len(raw)} characters; at most {MAX_ARGUMENTS_CHARS}"
            )
        try:
            raw = json.loads(raw or "{}")
        except RecursionError:
            raise InvalidDecision(f"arguments of {name} are nested too deep") from None
        except ValueError as exc:  # bad JSON, or a number too long to read
            raise InvalidDecision(f"arguments of {name} are not valid JSON: {exc}") from None
    if not isinstance(raw, dict):
        raise InvalidDecision(f"arguments of {name} must be a JSON object")
    try:
        return canonical_args(spec.args_model, raw)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'arguments'}: {e['msg']}" for e in exc.errors()
        )
        raise InvalidDecision(f"arguments of {name} are invalid: {problems}") from None
    except NotCanonical as exc:
        raise InvalidDecision(f"arguments of {name} are invalid: {exc}") from None


def read_decision(reply: ModelReply, tools: dict[str, ToolSpec]) -> Decision:
    """One decision from one reply. Raises InvalidDecision and nothing else, whatever the reply."""
    try:
        if reply.tool_calls:
            return _native(reply, tools)
        return _enveloped((reply.content or "").strip(), tools)
    except InvalidDecision as invalid:
        raise InvalidDecision(capped(escape_surrogates(str(invalid)), PROBLEM_CAP)) from None
    except (RecursionError, MemoryError, ValueError, TypeError, ArithmeticError) as exc:
        raise InvalidDecision(f"the reply could not be read: {type(exc).__name__}") from None
    except Exception as exc:  # a validator in an env's argument model raised its own error
        raise InvalidDecision(
            capped(f"the arguments could not be checked: {type(exc).__name__}: {exc}", PROBLEM_CAP)
        ) from None


def _native(reply: ModelReply, tools: dict[str, ToolSpec]) -> Decision:
    """The provider's own tool calls, each checked against its tool's arguments."""
    if len(reply.tool_calls) > MAX_TOOL_CALLS:
        raise InvalidDecision(
            f"{len(reply.tool_calls)} tool calls in one reply; at most {MAX_TOOL_CALLS}"
        )
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


def _enveloped(text: str, tools: dict[str, ToolSpec]) -> Decision:
    """The JSON envelope a model without native tool calls returns (`DecisionEnvelope`)."""
    if len(text) > MAX_ENVELOPE_CHARS:
        raise InvalidDecision(f"output is {len(text)} characters; at most {MAX_ENVELOPE_CHARS}")
    if text.startswith("```"):
        text = text.strip("`").removeprefix("json").strip()
    try:
        # Python's reader keeps a lone surrogate escape, which `normalized` makes visible.
        envelope = DecisionEnvelope.model_validate(normalized(json.loads(text)))
    except RecursionError:
        raise InvalidDecision("output is nested too deep") from None
    except NotCanonical as exc:
        raise InvalidDecision(f"output is not a valid decision: {exc}") from None
    except ValueError as exc:
        if isinstance(exc, ValidationError):
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "output"
            problem = f"{where}: {first['msg']}"
        else:
            problem = f"not JSON: {exc}"
        raise InvalidDecision(
            f"output is not a valid decision ({problem}). {ENVELOPE_INSTRUCTIONS}"
        ) from None
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
