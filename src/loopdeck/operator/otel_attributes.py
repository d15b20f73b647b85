"""What a run's events say on its OpenTelemetry spans, in the GenAI semantic conventions'
words (`gen_ai.*`) and loopdeck's own (`loopdeck.*`): the attributes of the run's, a model
call's and a tool call's span, and the operator's decisions, questions, guard trips and review
verdicts as span events. Plain data, no SDK: `operator/otel_export.py` makes the spans.

Content, said only when asked for (`content=True`), is any text loopdeck did not write itself
(the env's, the model's or the operator's words: a token, an address, a database URL): the
goal, the model's text, plans and reason codes, arguments, results, the stop's detail, error
messages, questions, evidence, answers, operator messages, an approval's reason, an edit's
values, a grant's globs. Always said: ids, hashes, names (env, model, tool, script, a field),
counts, times, loopdeck's own words and codes (stop reason, state, status, risk, a question's
title and choices, an error code of its closed set).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from loopdeck.core.event_base import CallStatus
from loopdeck.core.events import (
    ApprovalDecided,
    ApprovalInvalidated,
    ApprovalRequested,
    ApprovalWithdrawn,
    BudgetUpdated,
    CallProposed,
    ContextCompacted,
    DecisionInvalid,
    DecisionMade,
    Event,
    GrantGiven,
    GrantRevoked,
    GuardTripped,
    ModelCalled,
    ModelRetry,
    OperatorCommand,
    OperatorMessage,
    OutcomeResolved,
    PlanWritten,
    QuestionAnswered,
    QuestionAsked,
    RecordingHeld,
    RecordingResumed,
    ReviewVerdict,
    RunCorrected,
    RunStarted,
    RunStopped,
    ToolFinished,
    ToolRetry,
    UnrequestedChange,
)
from loopdeck.core.states import StopReason
from loopdeck.core.tools import ErrorCode

Value = str | bool | int | float | Sequence[str]
Attributes = dict[str, Value]

# LiteLLM's provider prefixes with a name of their own in the conventions' list.
PROVIDERS = {
    "anthropic": "anthropic", "azure": "azure.ai.openai", "azure_ai": "azure.ai.inference",
    "bedrock": "aws.bedrock", "cohere": "cohere", "deepseek": "deepseek", "gemini": "gcp.gemini",
    "groq": "groq", "mistral": "mistral_ai", "openai": "openai", "perplexity": "perplexity",
    "vertex_ai": "gcp.vertex_ai", "watsonx": "ibm.watsonx.ai", "xai": "x_ai",
}  # fmt: skip
# Stops that are the run's failure (the span's status is an error); the others are its goal
# met or the operator's or the agent's own choice.
FAILED_STOPS = frozenset(StopReason) - {
    StopReason.GOAL_MET,
    StopReason.CANCELLED,
    StopReason.KILLED,
    StopReason.ASK_USER,
    StopReason.HANDOFF,
}
FAILED_CALLS = frozenset({CallStatus.FAILED, CallStatus.OUTCOME_UNKNOWN, CallStatus.INTERRUPTED})
CODES = frozenset(ErrorCode)  # loopdeck's own error codes: a result's other words are content


@dataclass(frozen=True)
class Mark:
    """A span event: its name, attributes, and the call whose span it goes on (None: the
    round's or the run's)."""

    name: str
    attributes: Attributes
    call_id: str | None = None


def provider(model: str) -> str:
    """The `gen_ai.provider.name` of a LiteLLM model name: its prefix, named as the
    conventions name it ("openai/gpt-4o" is "openai"); loopdeck's offline model is
    `loopdeck.scripted`."""
    if model == "scripted" or model.startswith("loopdeck-scripted"):
        return "loopdeck.scripted"
    prefix, slash, _ = model.partition("/")
    if slash:
        return PROVIDERS.get(prefix, prefix)
    for start, name in (("gpt", "openai"), ("o1", "openai"), ("o3", "openai"), ("o4", "openai")):
        if model.startswith(start):
            return name
    for start in ("claude", "gemini", "mistral", "deepseek"):
        if model.startswith(start):
            return PROVIDERS.get(start, start)
    return "litellm"


def _kept(attributes: Mapping[str, Value | None]) -> Attributes:
    return {key: value for key, value in attributes.items() if value is not None}


def as_json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


def _when(at: datetime | None) -> str | None:
    return None if at is None else at.isoformat()


def _text_message(role: str, text: str) -> str:
    """One message in the conventions' `gen_ai.input.messages` / `output.messages` shape."""
    return as_json([{"role": role, "parts": [{"type": "text", "content": text}]}])


def run_attributes(e: RunStarted, content: bool) -> Attributes:
    said: dict[str, Value | None] = {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.provider.name": provider(e.model),
        "gen_ai.agent.name": e.env,
        "gen_ai.conversation.id": e.run_id,
        "gen_ai.request.model": e.model,
        "loopdeck.script": e.script,
        "loopdeck.mode": e.mode,
        "loopdeck.context_window": e.context_window,
    }
    if content:
        said["gen_ai.input.messages"] = _text_message("user", e.goal)
    return _kept(said)


def stop_attributes(
    stop: RunStopped | None, budget: BudgetUpdated | None, content: bool
) -> Attributes:
    """The run's span at its end: how it stopped and what its budgets used. The stop's
    detail is content: a goal check's or a tool's words may be in it."""
    said: dict[str, Value | None] = {}
    if stop is not None:
        said = {
            "loopdeck.stop_reason": stop.stop_reason.value,
            "loopdeck.state": stop.state.value,
            "loopdeck.unheard_messages": len(stop.unheard) or None,
        }
        said = dict(_with(said, content, detail=stop.detail or None))
    if budget is not None:
        for cap, (used, limit) in budget.usage.items():
            said[f"loopdeck.budget.{cap}.used"] = float(used)
            said[f"loopdeck.budget.{cap}.limit"] = float(limit)
        said["loopdeck.operator_wait_s"] = budget.operator_s
        said["loopdeck.cost_unknown_calls"] = budget.cost_unknown_calls
    return _kept(said)


def chat_attributes(e: ModelCalled, requested: str, content: bool) -> Attributes:
    said: dict[str, Value | None] = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": provider(requested or e.model),
        "gen_ai.request.model": requested or e.model,
        "gen_ai.response.model": e.model,
        "gen_ai.conversation.id": e.run_id,
        # Unknown tokens are left out (`_kept` drops None), never sent as 0.
        "gen_ai.usage.input_tokens": None if e.tokens_unknown else e.prompt_tokens,
        "gen_ai.usage.output_tokens": None if e.tokens_unknown else e.completion_tokens,
        "loopdeck.cost_usd": e.cost_usd,
        "loopdeck.role": e.role,
        "loopdeck.round": e.round,
    }
    if content and e.content:
        said["gen_ai.output.messages"] = _text_message("assistant", e.content)
    return _kept(said)


def plan_attributes(e: PlanWritten, content: bool) -> Attributes:
    said: dict[str, Value | None] = {"loopdeck.plan.step_count": len(e.steps)}
    return _kept(_with(said, content, **{"plan.steps": list(e.steps)}))


def tool_attributes(e: CallProposed, content: bool) -> Attributes:
    said: dict[str, Value | None] = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": e.tool,
        "gen_ai.tool.call.id": e.call_id,
        "gen_ai.tool.type": "function",
        "loopdeck.fingerprint": e.fingerprint,
        "loopdeck.risk": e.risk,
        "loopdeck.risk_source": e.risk_source or None,
        "loopdeck.state_hash": e.state_hash,
        "loopdeck.round": e.round,
    }
    if content:
        said["gen_ai.tool.call.arguments"] = as_json(e.args)
    return _kept(said)


def finished_attributes(e: ToolFinished, content: bool) -> Attributes:
    said: dict[str, Value | None] = {
        "loopdeck.status": e.status.value,
        "loopdeck.duration_ms": e.duration_ms,
        "error.type": failure(e) if e.status in FAILED_CALLS else None,
    }
    if content and e.result:
        said["gen_ai.tool.call.result"] = as_json(e.result)
    return _kept(said)


def failure(e: ToolFinished) -> str:
    """A failed call's error code (`TIMEOUT`, `TOOL_CRASHED`), else its status."""
    error = e.result.get("error")
    code = error.get("code") if isinstance(error, dict) else None
    return str(code) if code in CODES else e.status.value


def mark(event: Event, content: bool) -> Mark | None:
    """The span event an event makes, or None (the events that make spans, or nothing)."""
    return decision_mark(event, content) or run_mark(event, content)


def decision_mark(event: Event, content: bool) -> Mark | None:
    """The operator's decisions and the questions asked of it."""
    match event:
        case ApprovalRequested():
            return _approval_requested(event, content)
        case ApprovalDecided():
            return _approval_decided(event, content)
        case ApprovalInvalidated(call_id=call_id, problem=problem):
            said: Said = _with({}, content, problem=problem)
            return _mark("loopdeck.approval.invalidated", said, call_id)
        case ApprovalWithdrawn(call_id=call_id):
            return _mark("loopdeck.approval.withdrawn", {}, call_id)
        case GrantGiven():
            return _grant_given(event, content)
        case GrantRevoked(grant_id=grant_id, by=by):
            return _mark(
                "loopdeck.grant.revoked", {"loopdeck.grant_id": grant_id, "loopdeck.by": by}
            )
        case OutcomeResolved(call_id=call_id, applied=applied, by=by):
            said = {"loopdeck.applied": applied, "loopdeck.by": by}
            return _mark("loopdeck.outcome.resolved", said, call_id)
        case QuestionAsked():
            return _question_asked(event, content)
        case QuestionAnswered(question_id=question_id, answer=answer, by=by):
            asked = {"loopdeck.question_id": question_id, "loopdeck.by": by}
            return _mark("loopdeck.question.answered", _with(asked, content, answer=answer))
    return None


Said = Mapping[str, Value | None]


def _mark(name: str, said: Said, call_id: str | None = None) -> Mark:
    return Mark(name, _kept(said), call_id)


def _with(said: Said, content: bool, **contents: Value | None) -> Said:
    """`said`, and with `content` the content fields as `loopdeck.<name>`."""
    if not content:
        return said
    return {**said, **{f"loopdeck.{name}": value for name, value in contents.items()}}


def _approval_requested(e: ApprovalRequested, content: bool) -> Mark:
    said: Said = {
        "loopdeck.fingerprint": e.fingerprint,
        "loopdeck.args_sha256": e.args_sha256,
        "loopdeck.expires_at": _when(e.expires_at),
        "loopdeck.grant_id": e.grant_id,
        "loopdeck.asked_again": bool(e.asked_again) or None,
    }
    contents = {"rationale": e.rationale or None, "plan_step": e.plan_step}
    said = _with(said, content, **contents, args=as_json(e.args))
    return _mark("loopdeck.approval.requested", said, e.call_id)


def _approval_decided(e: ApprovalDecided, content: bool) -> Mark:
    fields = [line.lstrip("+- ").partition(":")[0] for line in e.changes]
    said: Said = {
        "loopdeck.approved": e.approved,
        "loopdeck.by": e.by,
        "loopdeck.grant_id": e.grant_id,
        "loopdeck.edited": e.args is not None,
        "loopdeck.changed_fields": fields or None,
    }
    edit = None if e.args is None else as_json(e.args)
    said = _with(said, content, reason=e.reason or None, changes=list(e.changes) or None,
                 args=edit)  # fmt: skip
    return _mark("loopdeck.approval.decided", said, e.call_id)


def _grant_given(e: GrantGiven, content: bool) -> Mark:
    said: Said = {
        "loopdeck.grant_id": e.grant_id,
        "loopdeck.by": e.by,
        "gen_ai.tool.name": e.tool,
        "loopdeck.scope": e.scope,
        "loopdeck.fields": list(e.fields) or None,
        "loopdeck.uses": e.uses,
        "loopdeck.expires_at": _when(e.expires_at),
    }
    globs = [f"{name}={glob}" for name, glob in e.fields.items()] or None
    said = _with(said, content, globs=globs, args=as_json(e.args) if e.args else None)
    return _mark("loopdeck.grant.given", said, e.call_id)


def _question_asked(e: QuestionAsked, content: bool) -> Mark:
    said: Said = {
        "loopdeck.question_id": e.question_id,
        "loopdeck.topic": e.topic,
        "loopdeck.title": e.title or None,
        "loopdeck.choices": list(e.choices) or None,
        "loopdeck.acts_at": _when(e.acts_at),
    }
    evidence = [f"{label}: {value}" for label, value in e.evidence] or None
    said = _with(said, content, question=e.question, evidence=evidence)
    return _mark("loopdeck.question.asked", said)


def run_mark(event: Event, content: bool) -> Mark | None:
    """The guard, the review, the operator's words and commands, retries and the store."""
    match event:
        case GuardTripped(call_id=call_id, fingerprint=fingerprint):
            return _mark("loopdeck.guard.tripped", {"loopdeck.fingerprint": fingerprint}, call_id)
        case ToolRetry(call_id=call_id):
            return _mark("loopdeck.tool.retry", _retry(event, content), call_id)
        case ReviewVerdict():
            return _mark("loopdeck.review.verdict", _verdict(event, content))
        case OperatorMessage(text=text, by=by):
            said: Said = {"loopdeck.by": by, "loopdeck.chars": len(text)}
            return _mark("loopdeck.operator.message", _with(said, content, text=text))
        case OperatorCommand(command=command, by=by):
            said = {"loopdeck.command": command, "loopdeck.by": by}
            return _mark("loopdeck.operator.command", said)
        case ModelRetry():
            return _mark("loopdeck.model.retry", _retry(event, content))
        case DecisionInvalid(round=round_, error=error, corrections_used=used):
            said = {"loopdeck.round": round_, "loopdeck.corrections_used": used}
            return _mark("loopdeck.decision.invalid", _with(said, content, error=error))
        case _:
            return _store_mark(event, content)


def _retry(e: ToolRetry | ModelRetry, content: bool) -> Said:
    said = {"loopdeck.attempt": e.attempt, "loopdeck.delay_s": e.delay_s}
    return _with(said, content, error=e.error)


def _verdict(e: ReviewVerdict, content: bool) -> Said:
    said: Said = {
        "loopdeck.round": e.round,
        "loopdeck.verdict": e.verdict,
        "loopdeck.unmet": len(e.reasons),
        "loopdeck.before_hash": e.before_hash,
        "loopdeck.after_hash": e.after_hash,
    }
    return _with(said, content, reasons=list(e.reasons))


def _store_mark(event: Event, content: bool) -> Mark | None:
    """The model's window compacted, the store held and back, the record put right."""
    match event:
        case ContextCompacted():
            said: Said = {
                "loopdeck.tokens_before": event.tokens_before,
                "loopdeck.tokens_after": event.tokens_after,
                "loopdeck.reason": event.reason,
                "loopdeck.results_shortened": event.results_shortened,
                "loopdeck.turns_dropped": event.turns_dropped,
            }
            return _mark("loopdeck.context.compacted", said)
        case RecordingHeld(cause=cause, detail=detail, bound_s=bound):
            said = {"loopdeck.cause": cause, "loopdeck.bound_s": bound}  # detail: the driver's
            return _mark("loopdeck.recording.held", _with(said, content, detail=detail))
        case RecordingResumed(cause=cause, held_s=held):
            said = {"loopdeck.cause": cause, "loopdeck.held_s": held}
            return _mark("loopdeck.recording.resumed", said)
        case RunCorrected(detail=detail):
            return _mark("loopdeck.run.corrected", {"loopdeck.detail": detail})
        case UnrequestedChange(added=added, changed=changed, removed=removed, stops=stops):
            paths = len(added) + len(changed) + len(removed)  # the paths are content: not sent
            said = {"loopdeck.stops": stops, "loopdeck.paths": paths}
            return _mark("loopdeck.unrequested_change", said)
    return None


def decision_attributes(e: DecisionMade, content: bool) -> Attributes:
    """What loopdeck read in a model's reply, on that call's span."""
    said: Said = {"loopdeck.decision": e.decision, "loopdeck.via": e.via,
                  "loopdeck.plan_step": e.plan_step}  # fmt: skip
    return _kept(_with(said, content, reason_code=e.reason_code or None))
