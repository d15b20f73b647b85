"""Approval receipts for writes, the one decision type, and the approvers asked for it.

The approval path, one word a step: the model *proposes* a call; a write is *asked*
(`Approver.ask`, an `ApprovalRequest`); the operator or an approver *decides* (one
`ApprovalDecision`, the same object from the console's dialog through the link, the queue
and the store to the `approval_decided` event); the call is *dispatched* under its receipt.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict

from loopdeck.core.asked_call import AskedCall
from loopdeck.core.canonical import sha256_hex
from loopdeck.core.decided_by import DecidedBy
from loopdeck.core.grant_rules import GrantRule


def args_digest(args: dict[str, Any]) -> str:
    return sha256_hex(args)


class _OfRun(BaseModel):
    """The run a request is of: the first of its fields, as an event's `run_id` is."""

    model_config = ConfigDict(frozen=True)

    run_id: str


class ApprovalRequest(AskedCall, _OfRun):
    """One write asked of an approver: the asked call, of its run, and the rule that asked."""

    # The policy's rule that hands this call to the operator, and why (None: no rule did).
    asked_by: DecidedBy | None = None


REJECTED = "rejected by the operator"  # a rejection's reason when the operator gave none


class ApprovalDecision(BaseModel):
    """The one decision on one asked call, whoever made it (a person, `--approve auto`)."""

    model_config = ConfigDict(frozen=True)

    call_id: str
    approved: bool
    reason: str = ""
    by: str = "operator"
    # The operator's edit: the arguments the call runs with instead of the proposed ones.
    args: dict[str, Any] | None = None
    # Approve and grant: later calls this rule covers are approved without asking.
    grant: GrantRule | None = None
    # The asking it was made on (its `requested_at`), when the decider says which (the
    # store's row): an earlier one than the run asks now when the run asked again before it
    # read a decision the store had taken. None: the asking it answers.
    asked_at: datetime | None = None
    # The same, by position, as a run's log records it (`ApprovalDecided.on_earlier_ask`): the
    # n-th asking back among those that ended unanswered. 0: the asking it answers.
    on_earlier_ask: int = 0
    # When it was made, when the decider says (the store's row): a run rebuilt after it
    # counts its operator's wait up to then (`BudgetLedger.decided`). None: as it is taken.
    decided_at: datetime | None = None

    def with_reason(self) -> ApprovalDecision:
        """A rejection without a reason says it was the operator's."""
        if self.approved or self.reason:
            return self
        return self.model_copy(update={"reason": REJECTED})


class ApprovalReceipt(BaseModel):
    """Permission for exactly one call, with exactly these arguments, from exactly this state,
    for as long as its asking was open (`valid_for`), counted from when the run takes the
    decision (its receipt is issued then, not at the asking's expiry): the store
    refuses a decision once its asking expired, so a decision it took just before the expiry,
    which the run read in its last look past it, is carried out (it never gets a receipt
    expired already, asked again though `approve` said approved)."""

    model_config = ConfigDict(frozen=True)

    run_id: str
    call_id: str
    args_sha256: str
    state_hash: str
    issued_at: datetime
    expires_at: datetime
    approved_by: str

    @classmethod
    def issue(
        cls,
        request: ApprovalRequest,
        decision: ApprovalDecision,
        args: dict[str, Any] | None = None,
    ) -> ApprovalReceipt:
        """Bound to the request's arguments, or to `args`, the operator's edit of them; issued
        as the run takes the decision."""
        issued = datetime.now(UTC)
        return cls(
            run_id=request.run_id,
            call_id=request.call_id,
            args_sha256=request.args_sha256 if args is None else args_digest(args),
            state_hash=request.state_hash,
            issued_at=issued,
            expires_at=issued + valid_for(request),
            approved_by=decision.by,
        )

    def problem(
        self,
        *,
        run_id: str,
        call_id: str,
        args: dict[str, Any],
        state_hash: str,
        now: datetime | None = None,
    ) -> str | None:
        """Why this receipt does not cover the call about to run, or None if it does."""
        now = now or datetime.now(UTC)
        if run_id != self.run_id or call_id != self.call_id:
            return "receipt belongs to another call"
        if args_digest(args) != self.args_sha256:
            return "arguments changed since approval"
        if state_hash != self.state_hash:
            return "environment state changed since approval"
        if now >= self.expires_at:
            return "approval expired"
        return None


def valid_for(request: ApprovalRequest) -> timedelta:
    """How long the request was open for a decision (the asking's own recorded times, one
    clock): how long its receipt holds once decided."""
    return max(request.expires_at - request.requested_at, timedelta(0))


def request_for(
    *,
    run_id: str,
    call_id: str,
    tool: str,
    args: dict[str, Any],
    state_hash: str,
    fingerprint: str,
    plan_step: str | None,
    ttl_s: float,
    rationale: str = "",
    asked_again: str = "",
    args_schema: dict[str, Any] | None = None,
    risk_source: str = "",
    not_editable: str = "",
    diff: str = "",
    asked_by: DecidedBy | None = None,
) -> ApprovalRequest:
    now = datetime.now(UTC)
    return ApprovalRequest(
        run_id=run_id,
        call_id=call_id,
        tool=tool,
        args=args,
        args_sha256=args_digest(args),
        state_hash=state_hash,
        fingerprint=fingerprint,
        plan_step=plan_step,
        requested_at=now,
        expires_at=now + timedelta(seconds=ttl_s),
        rationale=rationale,
        asked_again=asked_again,
        args_schema=args_schema or {},
        risk_source=risk_source,
        not_editable=not_editable,
        diff=diff,
        asked_by=asked_by,
    )


class Approver(Protocol):
    """Asked for the decision on a write. Cancelling the awaiting task withdraws the request."""

    async def ask(self, request: ApprovalRequest) -> ApprovalDecision: ...


@runtime_checkable
class StandingDecisions(Protocol):
    """An approver that can say at once, without waiting, a decision taken on an earlier
    asking of the call that the run has not read (the store took it before that asking
    expired): it stands over whatever decides the asking now, a policy's rule too."""

    async def standing(self, request: ApprovalRequest) -> ApprovalDecision | None: ...


class AutoApprover:
    async def ask(self, request: ApprovalRequest) -> ApprovalDecision:
        return ApprovalDecision(call_id=request.call_id, approved=True, by="auto")


class DenyApprover:
    def __init__(self, reason: str = "writes are denied in this run (--approve deny)") -> None:
        self.reason = reason

    async def ask(self, request: ApprovalRequest) -> ApprovalDecision:
        return ApprovalDecision(
            call_id=request.call_id, approved=False, reason=self.reason, by="deny"
        )


class Answer(BaseModel):
    model_config = ConfigDict(frozen=True)

    text: str
    by: str = "operator"
    decided_at: datetime | None = None  # as `ApprovalDecision.decided_at`


class Answerer(Protocol):
    """Answers the model's question (`ask_user`). Cancelling the wait withdraws it."""

    async def answer(self, run_id: str, question_id: str, question: str) -> Answer: ...
