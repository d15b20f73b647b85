"""Asking for a write: the request put to the approver, its decision recorded, and a receipt
that still covers the call once the decision is durable and the state read again.

`until_held` is the one approval loop of every kind of run: it asks (`ask_once`) up to
`MAX_APPROVAL_ASKS` times, each ask ending in `Approved`, `Rejected` or `AskAgain` (the approval
no longer covers the call), and hands an approval to the kind's `carry_out`, which may find it
no longer holds. An edit of a tool that cannot carry one out (`ToolSpec.not_editable`: an
agent's own call) is recorded as what happens instead: a rejection whose reason tells the agent
what to run.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol, TypeVar

from loopdeck.core.approvals import (
    ApprovalDecision,
    ApprovalReceipt,
    ApprovalRequest,
    Approver,
    StandingDecisions,
    request_for,
)
from loopdeck.core.asked_on import as_logged, asks_back, made_on
from loopdeck.core.budgets import BudgetLedger
from loopdeck.core.canonical import canonical_args
from loopdeck.core.config import RunConfig
from loopdeck.core.control import StopRun
from loopdeck.core.decided_by import DecidedBy
from loopdeck.core.decisions import Decision, ToolCall
from loopdeck.core.environment import Environment
from loopdeck.core.events import (
    ApprovalDecided,
    ApprovalInvalidated,
    ApprovalRequested,
    ApprovalWithdrawn,
    CallStatus,
    Emit,
)
from loopdeck.core.grants import Grants
from loopdeck.core.outcome import CallRecord
from loopdeck.core.policy_gate import CallBook, PolicyGate, PolicyStep, Ruling
from loopdeck.core.states import RunState, StateMachine, StopReason
from loopdeck.core.text import capped, json_text, visible
from loopdeck.core.timeouts import bounded
from loopdeck.core.tools import ToolSpec

T = TypeVar("T")
R = TypeVar("R")
MAX_APPROVAL_ASKS = 3
# How long past its expiry the run still looks for a decision recorded before it (the store
# refuses one after: `store/queries.decide`), which the approver had not yet read.
LAST_LOOK_S = 0.5
REASON_CAP = 2000
CHANGE_WIDTH = 200  # what a changed field's value shows of itself, before and after


class ApprovalHost(Protocol):
    """What asking for a write needs from its run."""

    config: RunConfig
    plan: list[str]
    machine: StateMachine
    tools: dict[str, ToolSpec]
    env: Environment
    ledger: BudgetLedger
    round: int

    @property
    def calls(self) -> CallBook: ...
    def move(self, target: RunState) -> None: ...
    @property
    def emit(self) -> Emit: ...
    async def flush_journal(self) -> None: ...
    def operator_time(self, why: str) -> AbstractContextManager[None]: ...
    async def interruptible(self, awaitable: Awaitable[T], *, by_cancel: bool = False) -> T: ...
    async def state_hash(self) -> str: ...


@dataclass(frozen=True)
class Approved:
    receipt: ApprovalReceipt
    state_hash: str  # the state the receipt was checked against, just now
    args: dict[str, Any]  # what the call runs with: the proposed arguments, or the edit
    changes: tuple[str, ...] = ()  # the operator's edit, field by field ("" when none)


@dataclass(frozen=True)
class Rejected:
    reason: str


@dataclass(frozen=True)
class AskAgain:
    problem: str  # why the approval no longer covers the call, said in the next ask
    state_hash: str  # the state the next ask is about
    args: dict[str, Any] | None = None  # the operator's edit, kept for the next ask
    # The asking that ended unanswered: a decision the store took on it before its expiry,
    # read only after the run asked again, is carried out as made on it.
    unanswered: ApprovalRequest | None = None


class WriteApprovals:
    def __init__(
        self, host: ApprovalHost, approver: Approver, policy: PolicyGate | None = None
    ) -> None:
        self.rt = host
        self.approver = approver
        self.pending: ApprovalRequest | None = None
        self.grants = Grants(host.emit, host.config.run_id)
        # The policy's say before the operator's (`core/policy_gate.py`); grants' without one.
        self.policy = PolicyStep(host, host.emit, self.grants, policy)

    @property
    def run_id(self) -> str:
        return self.rt.config.run_id

    async def until_held(
        self,
        record: CallRecord,
        call: ToolCall,
        decision: Decision,
        carry_out: Callable[[Approved], Awaitable[R | AskAgain]],
    ) -> R | Rejected:
        """Asked until an approval covers the call as `carry_out` carries it out (which may
        find it no longer does: `AskAgain`); a write whose approval cannot hold after
        `MAX_APPROVAL_ASKS` asks stops the run `policy_block`, its last request (still
        waiting, undecided) withdrawn."""
        again: AskAgain | None = None
        undecided = False
        unanswered: list[ApprovalRequest] = []
        for _ in range(MAX_APPROVAL_ASKS):
            got = await self.ask_once(record, call, decision, again, unanswered)
            if isinstance(got, Rejected):
                return got
            if isinstance(got, AskAgain):
                again, undecided = got, True
                unanswered += [got.unanswered] if got.unanswered is not None else []
                continue
            done = await carry_out(got)
            if not isinstance(done, AskAgain):
                return done
            again, undecided = done, False
        if undecided:
            self.rt.emit(ApprovalWithdrawn, run_id=self.run_id, call_id=record.call_id)
        raise StopRun(
            StopReason.POLICY_BLOCK,
            f"approval for {call.tool} ({record.call_id}) could not be kept valid after "
            f"{MAX_APPROVAL_ASKS} asks",
        )

    def refuse(self, record: CallRecord, call: ToolCall, why: str) -> Rejected:
        """A call loopdeck refuses on its own (nobody is asked): still a recorded decision,
        by loopdeck, with its reason."""
        spec = self.rt.tools[call.tool]
        request = request_for(
            run_id=self.run_id, call_id=record.call_id, tool=call.tool, args=call.args,
            state_hash=record.state_hash, fingerprint=record.fingerprint, plan_step=None,
            ttl_s=self.rt.config.approval_ttl_s, risk_source=spec.risk_source,
            not_editable=spec.not_editable,
        )  # fmt: skip
        self.rt.emit(ApprovalRequested, grant_id=None, **request.model_dump())
        refused = ApprovalDecision(call_id=record.call_id, approved=False, reason=why, by=LOOPDECK)
        self._decided(request, refused, Ruling(), record)
        return Rejected(capped(why, REASON_CAP))

    async def ask_once(
        self,
        record: CallRecord,
        call: ToolCall,
        decision: Decision,
        again: AskAgain | None,
        unanswered: Sequence[ApprovalRequest] = (),
    ) -> Approved | Rejected | AskAgain:
        """One ask: the first about the state the call was proposed in, the next (`again`)
        about the state it found changed. The policy's rule may decide it, or a grant that
        covers a first ask; else the operator (an ask again without a policy always is). A
        decision made on an earlier asking that ended `unanswered` (the store took it before
        that asking expired; the run had not read it) is bound to that asking's arguments and
        state, as its decider saw them."""
        spec = self.rt.tools[call.tool]
        proposed = again.args if again and again.args is not None else call.args
        asked_in = again.state_hash if again else None
        ruling = self.policy.ruling(record, self.rt.calls, call.tool, proposed, asked_in)
        request = await self._request(record, call, decision, again, proposed, ruling)
        decided = await self._ask(request, record, ruling, unanswered)
        if decided is None:  # nobody decided before the request expired: asked again
            expired = f"the request expired unanswered at {request.expires_at:%H:%M:%S} UTC"
            self.invalidated(record.call_id, expired, unanswered=True)
            args_kept = again.args if again else None
            return AskAgain(expired, await self.rt.state_hash(), args_kept, request)
        if ruling.decision is not None and decided is not ruling.decision:
            ruling = Ruling()  # a decision the store took on an earlier asking stood over it
        bound = made_on(request, decided, unanswered)
        back, request = (asks_back(bound, unanswered) if bound is not request else 0), bound
        proposed = request.args
        if decided.approved and decided.args is not None and spec.not_editable:
            decided = told_instead(decided, spec.not_editable)
        if not decided.approved:
            self._decided(request, decided, ruling, record, back=back)
            self.rt.move(RunState.DECIDING)
            return Rejected(capped(decided.reason or "rejected by the operator", REASON_CAP))
        args, refused = self._edit(spec, proposed, decided.args)
        changes = arg_changes(call.args, args) if args != call.args else []
        edit = args if changes else None
        self._decided(request, decided, ruling, record, edit, changes, back)
        if refused:
            self.invalidated(record.call_id, refused)
            return AskAgain(refused, request.state_hash)
        receipt = ApprovalReceipt.issue(request, decided, args)
        if decided.grant is not None:
            self.grants.give(record.call_id, call.tool, decided.grant, args, decided.by)
        # The approval is durable before the write runs: a crash in between leaves an
        # approved write with no recorded outcome, which is shown and never re-run.
        await self.rt.flush_journal()
        # Checked at dispatch time: a state that changed since the request asks again.
        state_hash = await self.rt.state_hash()
        problem = self.receipt_problem(receipt, args, state_hash)
        if problem is not None:
            self.invalidated(record.call_id, problem)
            return AskAgain(problem, state_hash, args if args != call.args else None)
        return Approved(receipt, state_hash, args, tuple(changes))

    async def _request(
        self,
        record: CallRecord,
        call: ToolCall,
        decision: Decision,
        again: AskAgain | None,
        proposed: dict[str, Any],
        ruling: Ruling,
    ) -> ApprovalRequest:
        """The request an ask puts, with the write's diff (read off the event loop)."""
        spec = self.rt.tools[call.tool]
        asked = request_for(
            run_id=self.run_id,
            call_id=record.call_id,
            tool=call.tool,
            args=proposed,
            state_hash=again.state_hash if again else record.state_hash,
            fingerprint=record.fingerprint,
            plan_step=self._step_text(decision),
            ttl_s=self.rt.config.approval_ttl_s,
            rationale=capped(decision.message, REASON_CAP),
            asked_again=again.problem if again else "",
            args_schema=spec.args_schema(),
            risk_source=spec.risk_source,
            not_editable=spec.not_editable,
            diff=await asyncio.to_thread(self.rt.env.write_diff, record.call_id, proposed),
            asked_by=ruling.asked_by,
        )
        return as_logged(self.approver, asked)  # a rebuilt run's: as its log has it

    @staticmethod
    def _edit(
        spec: ToolSpec, proposed: dict[str, Any], edited: dict[str, Any] | None
    ) -> tuple[dict[str, Any], str]:
        """The arguments the call runs with, and why an edit is refused ("" when it is
        not): validated by the tool's own model."""
        if edited is None:
            return proposed, ""
        try:
            return canonical_args(spec.args_model, edited), ""
        except (ValueError, TypeError) as exc:
            said = capped(str(exc), REASON_CAP)
            return proposed, f"the operator's edited arguments are refused: {said}"

    def invalidated(self, call_id: str, problem: str, *, unanswered: bool = False) -> None:
        self.rt.emit(
            ApprovalInvalidated, run_id=self.run_id, call_id=call_id, problem=problem,
            unanswered=unanswered,
        )  # fmt: skip

    def receipt_problem(
        self, receipt: ApprovalReceipt, args: dict[str, Any], state_hash: str
    ) -> str | None:
        return receipt.problem(
            run_id=self.run_id, call_id=receipt.call_id, args=args, state_hash=state_hash
        )

    def withdraw(self) -> None:
        """At the stop: a pending approval is withdrawn."""
        if self.pending is not None:
            call_id, self.pending = self.pending.call_id, None
            self.rt.emit(ApprovalWithdrawn, run_id=self.run_id, call_id=call_id)

    def _step_text(self, decision: Decision) -> str | None:
        step = decision.plan_step
        if step is None or not 1 <= step <= len(self.rt.plan):
            return None
        return f"{step}. {self.rt.plan[step - 1]}"

    async def _ask(
        self,
        request: ApprovalRequest,
        record: CallRecord,
        ruling: Ruling,
        unanswered: Sequence[ApprovalRequest] = (),
    ) -> ApprovalDecision | None:
        """The decision (a rule's or a grant's made already: nobody is asked), or None when
        the request expired with nobody deciding (a decision refused once it expired would
        otherwise leave the run waiting on nothing). A decision the store took before the
        expiry is still looked for `LAST_LOOK_S` past it: the approver may not have read it
        yet, and the next ask would replace it unread. One it took on an earlier asking that
        ended `unanswered` stands over a rule's (`over_ruling`): the row and the run agree."""
        rt = self.rt
        if rt.machine.state is not RunState.AWAITING_APPROVAL:
            rt.move(RunState.AWAITING_APPROVAL)
        record.status = CallStatus.PENDING_APPROVAL
        rt.emit(
            ApprovalRequested,
            run_id=self.run_id,
            grant_id=ruling.grant.grant_id if ruling.grant else None,
            **request.model_dump(exclude={"run_id"}),
        )
        if ruling.decision is not None:  # still a recorded decision, by the rule or grant
            return ruling.taken(await self._standing(request, unanswered))
        self.pending = request
        left = max((request.expires_at - datetime.now(UTC)).total_seconds(), 0.0)
        try:
            with rt.operator_time("approval"):
                asked = bounded(self.approver.ask(request), left + LAST_LOOK_S)
                decided: ApprovalDecision | None = await rt.interruptible(asked, by_cancel=True)
        except TimeoutError:
            decided = None
        self.pending = None
        return decided

    async def _standing(
        self, request: ApprovalRequest, unanswered: Sequence[ApprovalRequest]
    ) -> ApprovalDecision | None:
        """A decision the approver has at once on one of the `unanswered` askings, if any."""
        if not unanswered or not isinstance(approver := self.approver, StandingDecisions):
            return None
        found = await self.rt.interruptible(approver.standing(request), by_cancel=True)
        if found is None or made_on(request, found, unanswered) is request:
            return None  # none, or not on an earlier asking: the ruling decides this one
        return found

    def _decided(
        self,
        request: ApprovalRequest,
        decided: ApprovalDecision,
        ruling: Ruling,
        record: CallRecord,
        args: dict[str, Any] | None = None,
        changes: list[str] | None = None,
        back: int = 0,
    ) -> None:
        """Recorded with who decided: the ruling's rule or grant, else whoever answered."""
        by = ruling.decided_by if ruling.decision is not None else None
        record.decided_by = by or DecidedBy.of(decided.by)
        self.rt.emit(
            ApprovalDecided,
            run_id=self.run_id,
            call_id=request.call_id,
            approved=decided.approved,
            reason=capped(decided.reason, REASON_CAP),
            by=decided.by,
            args=args,
            changes=changes or [],
            grant_id=ruling.grant.grant_id if ruling.grant else None,
            decided_by=record.decided_by,
            on_earlier_ask=back,
        )


LOOPDECK = "loopdeck"  # who decided a call nobody was asked about


def told_instead(decided: ApprovalDecision, why: str) -> ApprovalDecision:
    """An edit the call cannot carry out (the agent runs its own input), recorded as what
    happens instead: a rejection that tells the agent what to run."""
    edited = json_text(decided.args)
    reason = capped(f"Run it with this input instead: {edited} ({why})", REASON_CAP)
    return decided.model_copy(update={"approved": False, "args": None, "reason": reason})


def arg_changes(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """What an edit changed, a line a field: `path: "a.txt" → "b.txt"`, `+ mode: "w"`,
    `- force: true`."""
    said: list[str] = []
    for name in sorted(before.keys() | after.keys()):
        if name not in after:
            said.append(f"- {name}: {_shown(before[name])}")
        elif name not in before:
            said.append(f"+ {name}: {_shown(after[name])}")
        elif json_text(before[name]) != json_text(after[name]):
            said.append(f"{name}: {_shown(before[name])} → {_shown(after[name])}")
    return said


def _shown(value: Any) -> str:
    text = visible(json_text(value))
    return text if len(text) <= CHANGE_WIDTH else text[: CHANGE_WIDTH - 1] + "…"
