"""The operator's decisions and the questions asked of it, and the policy's, as span events
(`Mark`s): who decided each call (an operator and the channel, the default, a grant, a rule
of a policy by its file's hash), what a policy decided and would have decided. Content (a
reason, an edit's values, a rule's message, a policy's text) only when asked for."""

from __future__ import annotations

from loopdeck.core.decided_by import DecidedBy
from loopdeck.core.events import (
    ApprovalDecided,
    ApprovalInvalidated,
    ApprovalRequested,
    ApprovalWithdrawn,
    Event,
    GrantGiven,
    GrantRevoked,
    OutcomeResolved,
    PolicyDecided,
    PolicyInForce,
    QuestionAnswered,
    QuestionAsked,
)
from loopdeck.operator.otel_said import Mark, Said, as_json
from loopdeck.operator.otel_said import marked as _mark
from loopdeck.operator.otel_said import when_text as _when
from loopdeck.operator.otel_said import with_content as _with


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
            asked = {"loopdeck.question_id": question_id, "loopdeck.by": by,
                     **decided_by(DecidedBy.of(by), content)}  # fmt: skip
            return _mark("loopdeck.question.answered", _with(asked, content, answer=answer))
        case PolicyInForce() | PolicyDecided():
            return policy_mark(event, content)
    return None


def decided_by(by: DecidedBy | None, content: bool, prefix: str = "decided_by") -> Said:
    """Who decided, as attributes: `loopdeck.decided_by.who` (operator, default, grant, rule,
    loopdeck), the channel and operator, the grant, the rule with its level and its policy
    file's hash; the rule's message only as content."""
    if by is None:
        return {}
    said: Said = {f"loopdeck.{prefix}.{name}": value for name, value in by.flat().items()
                  if name != "why"}  # fmt: skip
    return _with(said, content, **{f"{prefix}.why": by.why or None})


def policy_mark(event: PolicyInForce | PolicyDecided, content: bool) -> Mark:
    """The policy in force (each level's hash and mode; its text as content), or its verdict
    on one ask: what it enforced and what its shadow levels would have decided."""
    if isinstance(event, PolicyInForce):
        said: Said = {
            "loopdeck.policy.sha256": event.sha256,
            "loopdeck.policy.levels": [level["level"] for level in event.levels],
            "loopdeck.policy.modes": [level["mode"] for level in event.levels],
            "loopdeck.policy.hashes": [level["sha256"] for level in event.levels],
            "loopdeck.run_kind": event.run_kind,
        }
        texts = [level["text"] for level in event.levels]
        return _mark("loopdeck.policy.in_force", _with(said, content, **{"policy.texts": texts}))
    said = {
        "loopdeck.policy.effect": event.effect,
        "loopdeck.policy.would": event.would,
        "loopdeck.policy.matched": list(event.matched) or None,
        "loopdeck.policy.errors": len(event.errors) or None,
        "loopdeck.grant_id": event.grant_id,
        **decided_by(event.decided_by, content),
        **decided_by(event.would_by, content, "would_by"),
    }
    return _mark("loopdeck.policy.decided", said, event.call_id)


def _approval_requested(e: ApprovalRequested, content: bool) -> Mark:
    said: Said = {
        "loopdeck.fingerprint": e.fingerprint,
        "loopdeck.args_sha256": e.args_sha256,
        "loopdeck.expires_at": _when(e.expires_at),
        "loopdeck.grant_id": e.grant_id,
        "loopdeck.asked_again": bool(e.asked_again) or None,
        **decided_by(e.asked_by, content, "asked_by"),
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
        **decided_by(e.decided_by or DecidedBy.of(e.by), content),
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
