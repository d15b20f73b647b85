"""One batch of proposed calls: guard, idempotency, approval receipts, dispatch, results."""

from __future__ import annotations

from collections.abc import Awaitable
from contextlib import AbstractContextManager
from typing import Any, Protocol, TypeVar

from loopdeck.core.approvals import (
    Answer,
    Answerer,
    ApprovalDecision,
    ApprovalReceipt,
    ApprovalRequest,
    Approver,
    request_for,
)
from loopdeck.core.budgets import BudgetLedger
from loopdeck.core.canonical import sha256_hex
from loopdeck.core.config import RunConfig
from loopdeck.core.control import StopRun
from loopdeck.core.decisions import MAX_TOOL_CALLS, Decision, ToolCall
from loopdeck.core.dispatcher import Dispatcher, ReceiptRefused
from loopdeck.core.env_thread import Then
from loopdeck.core.events import (
    ApprovalDecided,
    ApprovalInvalidated,
    ApprovalRequested,
    ApprovalWithdrawn,
    CallProposed,
    CallStatus,
    Event,
    GuardTripped,
    ToolFinished,
    ToolRetry,
)
from loopdeck.core.guard import NoProgressGuard, guard_key
from loopdeck.core.loop_say import operator_on_loop
from loopdeck.core.model import ModelReply
from loopdeck.core.outcome import CallRecord
from loopdeck.core.prompts import correction_message, tool_result_message
from loopdeck.core.states import RunState, StateMachine, StopReason
from loopdeck.core.text import capped, short_args
from loopdeck.core.tools import ErrorCode, ToolResult, ToolSpec

T = TypeVar("T")
MAX_APPROVAL_ASKS = 3
REASON_CAP = 2000
# A write that got this far ran, or may have: it never runs again in this run.
RAN_OR_MAY_HAVE = frozenset({CallStatus.EXECUTED, CallStatus.OUTCOME_UNKNOWN})


class RunHost(Protocol):
    """What a batch of calls needs from the run it belongs to."""

    config: RunConfig
    round: int
    plan: list[str]
    tools: dict[str, ToolSpec]
    ledger: BudgetLedger
    machine: StateMachine

    def move(self, target: RunState) -> None: ...
    def emit(self, event: Event) -> None: ...
    def publish_budget(self) -> None: ...
    async def flush_journal(self) -> None: ...
    def operator_time(self, why: str) -> AbstractContextManager[None]: ...
    async def interruptible(self, awaitable: Awaitable[T], *, by_cancel: bool = False) -> T: ...
    async def state_hash(self) -> str: ...
    async def check_goal_after(self, record: CallRecord) -> None: ...
    @property
    def snapshot_after_tool(self) -> Then: ...

    answerer: Answerer | None

    async def ask_operator(
        self, question: str, topic: str = "ask_user", timeout_s: float | None = None
    ) -> Answer | None: ...


class CallHandler:
    def __init__(self, host: RunHost, approver: Approver, dispatcher: Dispatcher) -> None:
        self.rt = host
        self.approver = approver
        self.dispatcher = dispatcher
        self.guard = NoProgressGuard()
        self.records: list[CallRecord] = []
        self.executed_writes: set[str] = set()
        self.pending: ApprovalRequest | None = None
        self._next_id = 0
        self._failures_in_a_row = 0
        self._first_call: dict[str, str] = {}  # fingerprint -> the call that first had it
        self._nudge: str | None = None

    @property
    def run_id(self) -> str:
        return self.rt.config.run_id

    def corrections_for(self, reply: ModelReply, problem: str) -> list[dict[str, Any]]:
        if not reply.tool_calls:
            return [correction_message(None, problem)]
        return [correction_message(call.id, problem) for call in reply.tool_calls]

    def withdraw_pending(self) -> None:
        """At the stop: a pending approval is withdrawn; calls cut short are marked so."""
        if self.pending is not None:
            call_id = self.pending.call_id
            self.pending = None
            self.rt.emit(ApprovalWithdrawn(run_id=self.run_id, call_id=call_id))
        cut_short = {
            CallStatus.RUNNING: CallStatus.INTERRUPTED,
            CallStatus.PROPOSED: CallStatus.SKIPPED,
            CallStatus.PENDING_APPROVAL: CallStatus.WITHDRAWN,
        }
        for record in self.records[-(MAX_TOOL_CALLS + 1) :]:
            if record.status in cut_short:
                status = cut_short[record.status]
                if status is CallStatus.INTERRUPTED and record.risk == "write":
                    status = CallStatus.OUTCOME_UNKNOWN  # a write cut short may have happened
                record.status = status
                self.rt.emit(
                    ToolFinished(
                        run_id=self.run_id,
                        call_id=record.call_id,
                        tool=record.tool,
                        status=record.status,
                        result={},
                        duration_ms=0.0,
                    )
                )

    async def run_batch(self, conversation: list[dict[str, Any]], decision: Decision) -> bool:
        """Run the decision's calls one at a time; True if the guard tripped on any of them.
        After a trip the rest of the reply is not executed."""
        tripped = False
        said: list[str] = []
        for call in decision.calls:
            if tripped:
                record, result = self._skip_after_trip(call)
            else:
                record, result = await self._run_one(call, decision)
                tripped = record.status is CallStatus.BLOCKED_REPEAT
            conversation.append(tool_result_message(call.provider_id, result.for_model()))
            if self._nudge is not None:  # the operator's word on the loop: go on with it
                said.append(self._nudge)
                self._nudge, tripped = None, False
            if record.status in (CallStatus.EXECUTED, CallStatus.OUTCOME_UNKNOWN):
                await self.rt.check_goal_after(record)
        # After the reply's last result: a message with tool calls is followed by its results.
        conversation.extend({"role": "user", "content": f"The operator says: {s}"} for s in said)
        return tripped

    def _step_text(self, decision: Decision) -> str | None:
        step = decision.plan_step
        if step is None or not 1 <= step <= len(self.rt.plan):
            return None
        return f"{step}. {self.rt.plan[step - 1]}"

    def _propose(self, call: ToolCall, state_hash: str) -> CallRecord:
        self._next_id += 1
        spec = self.rt.tools[call.tool]
        key = guard_key(call.tool, call.args, state_hash)
        record = CallRecord(
            call_id=f"c{self._next_id}",
            round=self.rt.round,
            tool=call.tool,
            args=call.args,
            risk=spec.risk,
            fingerprint=key.fingerprint,
            state_hash=state_hash,
        )
        self.records.append(record)
        self.rt.emit(
            CallProposed(
                run_id=self.run_id,
                call_id=record.call_id,
                round=record.round,
                tool=record.tool,
                args=record.args,
                risk=record.risk,
                fingerprint=record.fingerprint,
                state_hash=record.state_hash,
            )
        )
        return record

    def _skip_after_trip(self, call: ToolCall) -> tuple[CallRecord, ToolResult]:
        record = self._propose(call, "")
        message = "not executed: an earlier call in the same reply repeated a call"
        result = self._refusal(
            self.rt.tools[call.tool], record.call_id, ErrorCode.SKIPPED_AFTER_TRIP, message
        )
        return self._finish(record, CallStatus.SKIPPED_AFTER_TRIP, result)

    async def _run_one(self, call: ToolCall, decision: Decision) -> tuple[CallRecord, ToolResult]:
        rt = self.rt
        spec = rt.tools[call.tool]
        state_hash = await rt.state_hash()
        key = guard_key(call.tool, call.args, state_hash)
        record = self._propose(call, state_hash)
        if not self.guard.admit(key, exempt=spec.exempt_from_guard):
            rt.emit(
                GuardTripped(
                    run_id=self.run_id,
                    call_id=record.call_id,
                    tool=call.tool,
                    fingerprint=key.fingerprint,
                )
            )
            say, nudge, by = await operator_on_loop(
                rt,
                f"{record.call_id} {call.tool}({short_args(call.args, 60)})",
                key.fingerprint,
                state_hash,
                self._first_call.get(key.fingerprint),
            )
            if say == "stop":
                raise StopRun(
                    StopReason.NO_PROGRESS,
                    f"{call.tool} repeated with the same arguments from the same state "
                    f"({record.call_id}); stopped by {by}",
                )
            if say != "allow":
                if say == "nudge":
                    self._nudge = nudge
                message = (
                    f"{call.tool} repeated with the same arguments from the same state; "
                    "not executed"
                )
                return self._finish(
                    record,
                    CallStatus.BLOCKED_REPEAT,
                    self._refusal(spec, record.call_id, ErrorCode.REPEATED_CALL, message),
                )
            # allowed once by the operator (recorded with who in question_answered)
        else:
            self._first_call.setdefault(key.fingerprint, record.call_id)
        if spec.risk == "write":
            return await self._run_write(record, spec, call, decision)
        rt.ledger.before_tool_call()
        rt.move(RunState.EXECUTING)
        result = await self._dispatch(spec, record.call_id, call.args, None, state_hash)
        return self._executed(record, result)

    async def _run_write(
        self, record: CallRecord, spec: ToolSpec, call: ToolCall, decision: Decision
    ) -> tuple[CallRecord, ToolResult]:
        rt = self.rt
        idempotency = self._idempotency_key(spec, call.args)
        if idempotency in self.executed_writes:
            message = f"{call.tool} with these arguments already ran in this run; refused"
            result = self._refusal(spec, record.call_id, ErrorCode.DUPLICATE_WRITE, message)
            return self._finish(record, CallStatus.REFUSED_DUPLICATE, result)
        state_hash = record.state_hash
        asked_again = ""
        for _ in range(MAX_APPROVAL_ASKS):
            request = request_for(
                run_id=self.run_id,
                call_id=record.call_id,
                tool=call.tool,
                args=call.args,
                state_hash=state_hash,
                fingerprint=record.fingerprint,
                plan_step=self._step_text(decision),
                ttl_s=rt.config.approval_ttl_s,
                rationale=capped(decision.message, REASON_CAP),
                asked_again=asked_again,
            )
            decided = await self._ask(request)
            if not decided.approved:
                rt.move(RunState.DECIDING)
                reason = capped(decided.reason or "rejected by the operator", REASON_CAP)
                result = self._refusal(spec, record.call_id, ErrorCode.REJECTED, reason)
                return self._finish(record, CallStatus.REJECTED, result)
            receipt = ApprovalReceipt.issue(request, decided)
            # The approval is durable before the write runs: a crash in between leaves an
            # approved write with no recorded outcome, which is shown and never re-run.
            await rt.flush_journal()
            # Checked at dispatch time: a state that changed since the request asks again.
            state_hash = await rt.state_hash()
            problem = self._receipt_problem(receipt, call.args, state_hash)
            if problem is not None:
                rt.emit(
                    ApprovalInvalidated(run_id=self.run_id, call_id=record.call_id, problem=problem)
                )
                asked_again = problem
                continue
            rt.ledger.before_tool_call()
            rt.move(RunState.EXECUTING)
            try:
                result = await self._dispatch(spec, record.call_id, call.args, receipt, state_hash)
            except ReceiptRefused as refused:
                rt.move(RunState.DECIDING)
                rt.emit(
                    ApprovalInvalidated(
                        run_id=self.run_id, call_id=record.call_id, problem=str(refused)
                    )
                )
                asked_again = str(refused)
                continue
            self._after_write(result, idempotency)
            return self._executed(record, result)
        raise StopRun(
            StopReason.POLICY_BLOCK,
            f"approval for {call.tool} ({record.call_id}) could not be kept valid after "
            f"{MAX_APPROVAL_ASKS} asks",
        )

    def _after_write(self, result: ToolResult, idempotency: str) -> None:
        code = result.error.code if result.error else None
        if result.ok or code in (ErrorCode.OUTCOME_UNKNOWN, ErrorCode.INVALID_RESULT):
            self.executed_writes.add(idempotency)

    async def _ask(self, request: ApprovalRequest) -> ApprovalDecision:
        rt = self.rt
        if rt.machine.state is not RunState.AWAITING_APPROVAL:
            rt.move(RunState.AWAITING_APPROVAL)
        self.pending = request
        self._record_of(request.call_id).status = CallStatus.PENDING_APPROVAL
        rt.emit(ApprovalRequested(run_id=self.run_id, **request.model_dump(exclude={"run_id"})))
        with rt.operator_time("approval"):
            decided = await rt.interruptible(self.approver.ask(request), by_cancel=True)
        self.pending = None
        rt.emit(
            ApprovalDecided(
                run_id=self.run_id,
                call_id=request.call_id,
                approved=decided.approved,
                reason=capped(decided.reason, REASON_CAP),
                by=decided.by,
            )
        )
        return decided

    def _receipt_problem(
        self, receipt: ApprovalReceipt, args: dict[str, Any], state_hash: str
    ) -> str | None:
        return receipt.problem(
            run_id=self.run_id, call_id=receipt.call_id, args=args, state_hash=state_hash
        )

    @staticmethod
    def _idempotency_key(spec: ToolSpec, args: dict[str, Any]) -> str:
        if spec.idempotency_fields:
            args = {name: args.get(name) for name in spec.idempotency_fields}
        return sha256_hex([spec.name, args])

    async def _dispatch(
        self,
        spec: ToolSpec,
        call_id: str,
        args: dict[str, Any],
        receipt: ApprovalReceipt | None,
        state_hash: str,
    ) -> ToolResult:
        def on_retry(attempt: int, error: str, delay: float) -> None:
            self.rt.emit(
                ToolRetry(
                    run_id=self.run_id,
                    call_id=call_id,
                    tool=spec.name,
                    attempt=attempt,
                    error=error,
                    delay_s=delay,
                )
            )

        self._record_of(call_id).status = CallStatus.RUNNING
        return await self.rt.interruptible(
            self.dispatcher.run(
                spec,
                call_id,
                args,
                receipt=receipt,
                receipt_problem=lambda r: self._receipt_problem(r, args, state_hash),
                on_retry=on_retry,
                then=self.rt.snapshot_after_tool,
            )
        )

    def _record_of(self, call_id: str) -> CallRecord:
        return next(r for r in reversed(self.records) if r.call_id == call_id)

    def _refusal(self, spec: ToolSpec, call_id: str, code: ErrorCode, message: str) -> ToolResult:
        return ToolResult.failure(spec.name, call_id, code, message)

    def _executed(self, record: CallRecord, result: ToolResult) -> tuple[CallRecord, ToolResult]:
        rt = self.rt
        rt.ledger.record_tool_call()
        code = result.error.code if result.error else None
        if result.ok:
            status = CallStatus.EXECUTED
        elif code is ErrorCode.OUTCOME_UNKNOWN:
            status = CallStatus.OUTCOME_UNKNOWN
        else:
            status = CallStatus.FAILED
        self._finish(record, status, result)
        rt.move(RunState.DECIDING)
        rt.publish_budget()
        self._failures_in_a_row = 0 if result.ok else self._failures_in_a_row + 1
        if self._failures_in_a_row >= rt.config.max_consecutive_tool_failures:
            raise StopRun(
                StopReason.TOOL_FAILURE,
                f"{self._failures_in_a_row} tool calls failed in a row; last: {record.tool} "
                f"{code.value if code else '?'}",
            )
        return record, result

    def _finish(
        self, record: CallRecord, status: CallStatus, result: ToolResult
    ) -> tuple[CallRecord, ToolResult]:
        record.status = status
        record.result = result.for_model()
        record.duration_ms = result.provenance.duration_ms
        record.retries = max(result.provenance.attempts - 1, 0)
        self.rt.emit(
            ToolFinished(
                run_id=self.run_id,
                call_id=record.call_id,
                tool=record.tool,
                status=status,
                result=record.result,
                duration_ms=result.provenance.duration_ms,
            )
        )
        return record, result
