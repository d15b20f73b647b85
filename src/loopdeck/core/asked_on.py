"""Which asking of a call a decision was made on. A run that asked again after an asking
expired unanswered may read a decision the store took on that earlier asking (before it
expired): the decision binds that asking's arguments and state, as its decider saw them, and
the run's log records which one it was (`ApprovalDecided.on_earlier_ask`) so that a run rebuilt
from the log binds it alike."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from loopdeck.core.approvals import ApprovalDecision, ApprovalRequest


@runtime_checkable
class LoggedAskings(Protocol):
    """An approver of a run rebuilt from its log (`core/recorded_inputs.py`): it knows each
    asking the log has, by its times."""

    def as_logged(self, request: ApprovalRequest) -> ApprovalRequest: ...


def as_logged(approver: object, request: ApprovalRequest) -> ApprovalRequest:
    """The asking as the run's log has it, where the run is rebuilt from one and the log has
    its end (its times name it: a decision the store took on it names it by them), else as
    it is asked now."""
    return approver.as_logged(request) if isinstance(approver, LoggedAskings) else request


def made_on(
    request: ApprovalRequest, decided: ApprovalDecision, unanswered: Sequence[ApprovalRequest]
) -> ApprovalRequest:
    """The asking a decision was made on: the one asked now, or the earlier one it names
    among those that ended unanswered, by position (`on_earlier_ask`, as a run's log has it)
    or by when it was asked (`asked_at`, as the store has it)."""
    if 0 < decided.on_earlier_ask <= len(unanswered):
        return unanswered[-decided.on_earlier_ask]
    if decided.asked_at is None or decided.asked_at == request.requested_at:
        return request
    return next((r for r in unanswered if r.requested_at == decided.asked_at), request)


def asks_back(asking: ApprovalRequest, unanswered: Sequence[ApprovalRequest]) -> int:
    """How many askings back among the `unanswered` one `asking` is (1: the last)."""
    at = next(i for i, earlier in enumerate(unanswered) if earlier is asking)
    return len(unanswered) - at


def over_ruling(found: ApprovalDecision | None, ruled: ApprovalDecision) -> ApprovalDecision:
    """What the run takes where a rule or a grant decided the asking and the store has `found`
    on an earlier one: a rejection stands over any ruling, an approval only over one that
    approves (never carried out where the rule now denies: its row becomes the rule's)."""
    return found if found is not None and (not found.approved or ruled.approved) else ruled
