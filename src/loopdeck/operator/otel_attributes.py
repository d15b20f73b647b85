"""What a run's events say on its OpenTelemetry spans, in the GenAI semantic conventions'
words (`gen_ai.*`) and loopdeck's own (`loopdeck.*`): the attributes of the run's, a model
call's and a tool call's span, and the operator's decisions, questions, guard trips, review
verdicts and findings as span events. Plain data, no SDK: `operator/otel_export.py` makes the
spans.

Content, said only when asked for (`content=True`), is any text loopdeck did not write itself
(the env's, the model's or the operator's words: a token, an address, a database URL): the
goal, the model's text, plans and reason codes, arguments, results, the stop's detail, error
messages, questions, evidence, answers, operator messages, an approval's reason, an edit's
values, a grant's globs, a finding's words. Always said: ids, hashes, names (env, model, tool,
script, a field), counts, times, loopdeck's own words and codes (stop reason, state, status,
risk, a question's title and choices, an error code of its closed set).
"""

from __future__ import annotations

import contextlib
import json
from typing import Any

from loopdeck.core.event_base import CallStatus
from loopdeck.core.events import (
    BudgetUpdated,
    CallProposed,
    ContextCompacted,
    DecisionInvalid,
    DecisionMade,
    Event,
    Finding,
    GuardTripped,
    ModelCalled,
    ModelRetry,
    OperatorCommand,
    OperatorMessage,
    PlanWritten,
    RecordingHeld,
    RecordingResumed,
    ReviewVerdict,
    RunCorrected,
    RunStarted,
    RunStopped,
    ToolFinished,
    ToolProgress,
    ToolRetry,
    UnrequestedChange,
)
from loopdeck.core.states import StopReason
from loopdeck.core.tools import ErrorCode
from loopdeck.operator.otel_decisions import decision_mark
from loopdeck.operator.otel_said import Attributes as Attributes  # otel_spans' word for them
from loopdeck.operator.otel_said import Mark, Said, Value, as_json
from loopdeck.operator.otel_said import kept as _kept
from loopdeck.operator.otel_said import marked as _mark
from loopdeck.operator.otel_said import with_content as _with

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
        for cap, usage in budget.caps().items():
            # An unknown use is left out (`_kept` drops None), never sent as 0; what was
            # reported of it goes apart.
            said[f"loopdeck.budget.{cap.value}.used"] = usage.used
            said[f"loopdeck.budget.{cap.value}.limit"] = usage.limit
            if not usage.known:
                said[f"loopdeck.budget.{cap.value}.reported"] = usage.reported
        said["loopdeck.operator_wait_s"] = budget.operator_s
        said["loopdeck.cost_unknown_calls"] = budget.cost_unknown_calls
    return _kept(said)


def chat_attributes(
    e: ModelCalled, requested: str, content: bool, calls: list[dict[str, Any]] | None = None
) -> Attributes:
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
    if content and (e.content or calls):
        said["gen_ai.output.messages"] = _reply_message(e.content, calls or [])
    return _kept(said)


def _reply_message(text: str, calls: list[dict[str, Any]]) -> str:
    """The reply as the conventions' output message: its text, then its tool calls (the
    reply's own, as `ModelReplied` recorded them: id, name, arguments as sent)."""
    parts: list[dict[str, Any]] = [{"type": "text", "content": text}] if text else []
    for call in calls:
        arguments: Any = call.get("arguments", "")
        with contextlib.suppress(TypeError, ValueError):
            arguments = json.loads(arguments)
        parts.append({"type": "tool_call", "id": call.get("id"), "name": call.get("name"),
                      "arguments": arguments})  # fmt: skip
    return as_json([{"role": "assistant", "parts": parts}])


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


def run_mark(event: Event, content: bool) -> Mark | None:
    """The guard, the review and findings, the operator's words and commands, retries, a
    tool's progress and the store."""
    match event:
        case GuardTripped(call_id=call_id, fingerprint=fingerprint):
            return _mark("loopdeck.guard.tripped", {"loopdeck.fingerprint": fingerprint}, call_id)
        case ToolRetry(call_id=call_id):
            return _mark("loopdeck.tool.retry", _retry(event, content), call_id)
        case ToolProgress(call_id=call_id, progress=done, total=total, message=message):
            how: Said = {"loopdeck.progress": done, "loopdeck.total": total}  # its words: content
            return _mark("loopdeck.tool.progress", _with(how, content, message=message), call_id)
        case ReviewVerdict():
            return _mark("loopdeck.review.verdict", _verdict(event, content))
        case Finding(round=round_, text=text):  # its words may name paths, an upstream's error
            return _mark("loopdeck.finding", _with({"loopdeck.round": round_}, content, text=text))
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
