"""The events of the operator's decisions: a write asked and decided (edited, by a grant),
grants given and revoked, an unknown outcome resolved, a question asked and answered."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from loopdeck.caps import Cap
from loopdeck.core.asked_call import AskedCall
from loopdeck.core.decided_by import DecidedBy
from loopdeck.core.event_base import EventBase


class _ApprovalRequestedHead(EventBase):
    """The event's head: run, number, time and kind, first in a stored row as in any event
    (`store/chain.py` reads `at` where it stands)."""

    kind: Literal["approval_requested"] = "approval_requested"


class ApprovalRequested(AskedCall, _ApprovalRequestedHead):
    """A write asked: the request's call (`AskedCall`, declared once in `core/approvals.py`),
    stored with the same fields in the same order as before they were shared."""

    # Approved by this standing grant as it is asked: never pending, nobody is asked.
    grant_id: str | None = None
    # The policy's rule that hands this call to the operator, and why (None: no rule did).
    asked_by: DecidedBy | None = None


class ApprovalDecided(EventBase):
    kind: Literal["approval_decided"] = "approval_decided"
    call_id: str
    approved: bool
    reason: str
    by: str
    # The operator's edit: the arguments the call runs with, and what changed, field by field.
    args: dict[str, Any] | None = None
    changes: list[str] = []
    grant_id: str | None = None  # approved by this standing grant, not asked
    # Who decided: an operator and the channel, the default, a grant, a policy's rule.
    decided_by: DecidedBy | None = None
    # The asking it was made on: 0, the one just asked; n, the n-th back among those that
    # ended unanswered (the store took it before that one expired; the run read it later).
    # Its arguments and state are what the receipt binds, rebuilt alike from the log.
    on_earlier_ask: int = 0


class PolicyInForce(EventBase):
    """The policy a run's calls are decided under, recorded before its first decision: each
    level's file (user, env, run) with its SHA-256, mode and text, and the kind of run."""

    kind: Literal["policy_in_force"] = "policy_in_force"
    sha256: str  # of the levels' hashes together
    levels: list[dict[str, str]]  # level, path, sha256, mode, text
    run_kind: str
    # When its rules came into force (`rule.age_s` counts from it): the run's start, a
    # fork's source's (a fork goes on under its source's policy, ages and uses alike).
    rules_since: datetime | None = None


class PolicyDecided(EventBase):
    """What the policy decided on one ask of a call, before anyone else is asked: the
    attributes its rules saw (`facts`), the rule that decided what is enforced (`effect`:
    allow, deny, ask, or none: no rule of an enforced level matched) and what it would have
    decided counting its shadow levels too (`would`), the rules that matched and those that
    could not be evaluated."""

    kind: Literal["policy_decided"] = "policy_decided"
    call_id: str
    effect: Literal["allow", "deny", "ask", "none"]
    decided_by: DecidedBy | None = None
    would: Literal["allow", "deny", "ask", "none"]
    would_by: DecidedBy | None = None
    matched: list[str] = []  # "env:src-writes (allow)"
    errors: list[str] = []  # "env:after-untrusted: no such member in mapping: 'path'"
    grant_id: str | None = None  # a standing grant that covers the call
    facts: dict[str, Any] = {}


class GrantGiven(EventBase):
    """The operator approved a call and granted: later calls the rule covers are approved
    without asking, in this run only (`core/grants.py`)."""

    kind: Literal["grant_given"] = "grant_given"
    grant_id: str
    call_id: str  # the approval it came with
    tool: str
    scope: str
    fields: dict[str, str] = {}
    args: dict[str, Any] = {}  # what an `exact` grant holds to
    uses: int | None = None
    expires_at: datetime | None = None
    by: str


class GrantRevoked(EventBase):
    kind: Literal["grant_revoked"] = "grant_revoked"
    grant_id: str
    by: str


class OutcomeResolved(EventBase):
    """The operator's word on a write whose outcome was unknown: it took effect (recorded as
    executed) or it did not (failed, its idempotency key freed: the model may propose it
    again, asked again)."""

    kind: Literal["outcome_resolved"] = "outcome_resolved"
    call_id: str
    tool: str
    applied: bool
    by: str


class ApprovalInvalidated(EventBase):
    """The call's asking no longer stands: the approval the run took no longer covers the
    call (its state or arguments moved, an edit refused), or (`unanswered`) the asking
    expired with no decision read, when a decision the store took on it stands (the run's
    next ask reads it). Either way the call is asked again."""

    kind: Literal["approval_invalidated"] = "approval_invalidated"
    call_id: str
    problem: str
    unanswered: bool = False


class ApprovalWithdrawn(EventBase):
    kind: Literal["approval_withdrawn"] = "approval_withdrawn"
    call_id: str


class QuestionAsked(EventBase):
    """The model asked the operator (`ask_user`) and the run waits for the answer."""

    kind: Literal["question_asked"] = "question_asked"
    question_id: str
    question: str
    # ask_user: the model's question; budget: a cap crossed `pause_at` (continue, raise, stop).
    topic: Literal["ask_user", "budget", "loop"] = "ask_user"
    title: str = ""  # who asks, in words ("The guard stopped a repeat")
    choices: list[str] = []  # the answers understood (empty: free text)
    evidence: list[tuple[str, str]] = []  # (label, value) the operator decides on
    # budget: the cap that paused the run and what it had used (a raised cap must be above
    # it): what every front end checks an answer against before recording it.
    cap: Cap | None = None
    used: float | None = None
    acts_at: datetime | None = None  # when the run goes on alone if nobody answers


class QuestionAnswered(EventBase):
    kind: Literal["question_answered"] = "question_answered"
    question_id: str
    answer: str
    by: str
