"""Approval receipts for writes, and the approvers that issue decisions."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict

from loopdeck.core.canonical import sha256_hex


def args_digest(args: dict[str, Any]) -> str:
    return sha256_hex(args)


class ApprovalRequest(BaseModel):
    model_config = ConfigDict(frozen=True)

    run_id: str
    call_id: str
    tool: str
    args: dict[str, Any]
    args_sha256: str
    state_hash: str
    fingerprint: str
    plan_step: str | None
    requested_at: datetime
    expires_at: datetime
    # The model's own words for the turn that proposed the call ("" when it gave none).
    rationale: str = ""
    # Why this call is asked again ("" on the first ask): the last receipt's problem.
    asked_again: str = ""


class ApprovalDecision(BaseModel):
    model_config = ConfigDict(frozen=True)

    approved: bool
    reason: str = ""
    by: str = "operator"


class ApprovalReceipt(BaseModel):
    """Permission for exactly one call, with exactly these arguments, from exactly this state."""

    model_config = ConfigDict(frozen=True)

    run_id: str
    call_id: str
    args_sha256: str
    state_hash: str
    issued_at: datetime
    expires_at: datetime
    approved_by: str

    @classmethod
    def issue(cls, request: ApprovalRequest, decision: ApprovalDecision) -> ApprovalReceipt:
        return cls(
            run_id=request.run_id,
            call_id=request.call_id,
            args_sha256=request.args_sha256,
            state_hash=request.state_hash,
            issued_at=datetime.now(UTC),
            expires_at=request.expires_at,
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
    )


class Approver(Protocol):
    """Decides on a write. Cancelling the awaiting task withdraws the request."""

    async def decide(self, request: ApprovalRequest) -> ApprovalDecision: ...


class AutoApprover:
    async def decide(self, request: ApprovalRequest) -> ApprovalDecision:
        return ApprovalDecision(approved=True, by="auto")


class DenyApprover:
    def __init__(self, reason: str = "writes are denied in this run (--approve deny)") -> None:
        self.reason = reason

    async def decide(self, request: ApprovalRequest) -> ApprovalDecision:
        return ApprovalDecision(approved=False, reason=self.reason, by="deny")


class Answer(BaseModel):
    model_config = ConfigDict(frozen=True)

    text: str
    by: str = "operator"


class Answerer(Protocol):
    """Answers the model's question (`ask_user`). Cancelling the wait withdraws it."""

    async def answer(self, run_id: str, question_id: str, question: str) -> Answer: ...
