"""One batch of proposed calls: guard, idempotency, dispatch, results. Asking for a write
is `core/write_approvals.py`'s; the operator's say on a loop, `core/loop_say.py`'s."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar

from loopdeck.core.approvals import ApprovalReceipt
from loopdeck.core.budgets import BudgetLedger
from loopdeck.core.call_progress import reporting
from loopdeck.core.canonical import sha256_hex
from loopdeck.core.control import StopRun
from loopdeck.core.decisions import MAX_TOOL_CALLS, Decision, ToolCall
from loopdeck.core.dispatcher import Dispatcher, ReceiptRefused
from loopdeck.core.env_thread import Then
from loopdeck.core.event_base import cut_short
from loopdeck.core.events import (
    CallProposed,
    CallStatus,
    Emit,
    GuardTripped,
    ToolFinished,
    ToolRetry,
)
from loopdeck.core.guard import GuardKey, NoProgressGuard, guard_key
from loopdeck.core.loop_say import LoopHost, Repeat, operator_on_loop
from loopdeck.core.model import ModelReply
from loopdeck.core.outcome import CallRecord
from loopdeck.core.prompts import correction_message, operator_says, tool_result_message
from loopdeck.core.states import RunState, StopReason
from loopdeck.core.text import short_args
from loopdeck.core.tools import ErrorCode, ToolResult, ToolSpec
from loopdeck.core.unknown_outcomes import UnknownOutcomes
from loopdeck.core.write_approvals import Approved, AskAgain, Rejected, WriteApprovals

T = TypeVar("T")
# A write that got this far ran, or may have: it never runs again in this run.
RAN_OR_MAY_HAVE = frozenset({CallStatus.EXECUTED, CallStatus.OUTCOME_UNKNOWN})


class CallHost(LoopHost, Protocol):
    """What a batch of calls needs from the run it belongs to: the operator's say on a loop
    (`LoopHost`) and the members below. Asking for a write is `WriteApprovals`', with its own
    `ApprovalHost`."""

    round: int
    tools: dict[str, ToolSpec]
    ledger: BudgetLedger

    def move(self, target: RunState) -> None: ...
    @property
    def emit(self) -> Emit: ...
    def publish_budget(self) -> None: ...
    async def interruptible(self, awaitable: Awaitable[T], *, by_cancel: bool = False) -> T: ...
    async def state_hash(self) -> str: ...
    async def check_goal_after(self, record: CallRecord) -> None: ...
    @property
    def snapshot_after_tool(self) -> Then: ...


class CallHandler:
    def __init__(self, host: CallHost, approvals: WriteApprovals, dispatcher: Dispatcher) -> None:
        self.rt = host
        self.approvals = approvals
        self.dispatcher = dispatcher
        self.guard = NoProgressGuard()
        self.records: list[CallRecord] = []
        self.executed_writes: set[str] = set()
        self._next_id = 0
        self._failures_in_a_row = 0
        self._first_call: dict[str, str] = {}  # fingerprint -> the call that first had it
        self._nudge: str | None = None
        self.started: dict[str, float] = {}  # a call running -> when it began (monotonic)
        # What the operator said of this batch's calls (an edit), told after its last result.
        self.notes: list[str] = []
        self.unknown = UnknownOutcomes(self.guard, self.executed_writes, host.emit, self.run_id)

    @property
    def run_id(self) -> str:
        return self.rt.config.run_id

    def corrections_for(self, reply: ModelReply, problem: str) -> list[dict[str, Any]]:
        if not reply.tool_calls:
            return [correction_message(None, problem)]
        return [correction_message(call.id, problem) for call in reply.tool_calls]

    def withdraw_pending(self, why: str = "") -> None:
        """At the stop (`why`): a pending approval is withdrawn; calls cut short marked so."""
        self.approvals.withdraw()
        for record in self.records[-(MAX_TOOL_CALLS + 1) :]:
            if (status := cut_short(record.status, record.risk)) is not None:
                record.status = status
                if status in (CallStatus.INTERRUPTED, CallStatus.OUTCOME_UNKNOWN):  # why, how long
                    if (since := self.started.get(record.call_id)) is not None:
                        record.duration_ms = (time.monotonic() - since) * 1000
                    said = f"{record.tool} was cut short by the run's stop: {why}"
                    code = ErrorCode.OUTCOME_UNKNOWN  # for a read too: it may have answered
                    record.result = ToolResult.failure(record.tool, "", code, said).for_model()
                self.rt.emit(
                    ToolFinished,
                    run_id=self.run_id,
                    call_id=record.call_id,
                    tool=record.tool,
                    status=record.status,
                    result=record.result or {},
                    duration_ms=record.duration_ms or 0.0,
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
        said += self.notes
        self.notes = []
        conversation.extend(operator_says(s) for s in said)
        return tripped

    def _propose(
        self, call: ToolCall, state_hash: str, fingerprint: str | None = None
    ) -> CallRecord:
        """The call recorded and announced; `fingerprint`: its guard key's, if made already."""
        self._next_id += 1
        spec = self.rt.tools[call.tool]
        if fingerprint is None:
            fingerprint = guard_key(call.tool, call.args, state_hash).fingerprint
        record = CallRecord(
            call_id=f"c{self._next_id}",
            round=self.rt.round,
            tool=call.tool,
            args=call.args,
            risk=spec.risk,
            fingerprint=fingerprint,
            state_hash=state_hash,
            risk_source=spec.risk_source,
        )
        self.records.append(record)
        self.rt.emit(
            CallProposed,
            run_id=self.run_id,
            call_id=record.call_id,
            round=record.round,
            tool=record.tool,
            args=record.args,
            risk=record.risk,
            fingerprint=record.fingerprint,
            state_hash=record.state_hash,
            risk_source=record.risk_source,
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
        state_hash = await rt.state_hash()
        spec = rt.tools[call.tool]  # as `_propose` records it: a change of its risk may land
        key = guard_key(call.tool, call.args, state_hash)
        fingerprint = key.fingerprint
        record = self._propose(call, state_hash, fingerprint)
        if not self.guard.admit(key, exempt=spec.exempt_from_guard):
            blocked = await self._tripped(record, call, spec, key)
            if blocked is not None:
                return blocked
            # allowed once by the operator (recorded with who in question_answered)
        else:
            self._first_call.setdefault(fingerprint, record.call_id)
        if spec.risk == "write":
            return await self._run_write(record, spec, call, decision)
        rt.ledger.before_tool_call()
        rt.move(RunState.EXECUTING)
        result = await self._dispatch(spec, record.call_id, call.args, None)
        return self._executed(record, result)

    async def _tripped(
        self, record: CallRecord, call: ToolCall, spec: ToolSpec, key: GuardKey
    ) -> tuple[CallRecord, ToolResult] | None:
        """The guard saw this call before, from the same state: the operator has a say
        (`loop_say`); None when they allow it once."""
        rt = self.rt
        rt.emit(
            GuardTripped,
            run_id=self.run_id,
            call_id=record.call_id,
            tool=call.tool,
            fingerprint=key.fingerprint,
        )
        say, nudge, by = await operator_on_loop(rt, self._repeat(record, call, spec, key))
        if say == "stop":
            raise StopRun(
                StopReason.NO_PROGRESS,
                f"{call.tool} repeated with the same arguments from the same state "
                f"({record.call_id}); stopped by {by}",
            )
        if say == "allow":
            return None
        if say == "nudge":
            self._nudge = nudge
        message = f"{call.tool} repeated with the same arguments from the same state; not executed"
        return self._finish(
            record,
            CallStatus.BLOCKED_REPEAT,
            self._refusal(spec, record.call_id, ErrorCode.REPEATED_CALL, message),
        )

    def _repeat(self, record: CallRecord, call: ToolCall, spec: ToolSpec, key: GuardKey) -> Repeat:
        """The repeated call as the operator decides on it, with the earlier one's result."""
        earlier = self._first_call.get(key.fingerprint)
        first = next((r for r in self.records if r.call_id == earlier), None)
        ran = spec.risk == "write" and (
            self._idempotency_key(spec, call.args) in self.executed_writes
        )
        return Repeat(
            call=f"{record.call_id} {call.tool}({short_args(call.args, 60)})",
            fingerprint=key.fingerprint,
            state_hash=record.state_hash,
            earlier=earlier,
            earlier_result=_result_line(first),
            can_allow=not ran,
        )

    async def _run_write(
        self, record: CallRecord, spec: ToolSpec, call: ToolCall, decision: Decision
    ) -> tuple[CallRecord, ToolResult]:
        """Asked until an approval covers the call as it runs (`until_held`); never run
        twice."""
        if refused := self._duplicate(record, spec, call.args):
            return refused

        async def carry_out(got: Approved) -> tuple[CallRecord, ToolResult] | AskAgain:
            if got.changes:  # the operator's edit: the call is now the edited one
                self._edited(record, spec, got)
                if refused := self._duplicate(record, spec, got.args):
                    return refused
            self.rt.ledger.before_tool_call()
            self.rt.move(RunState.EXECUTING)
            try:
                result = await self._dispatch(spec, record.call_id, got.args, got)
            except ReceiptRefused as refused_receipt:
                self.rt.move(RunState.DECIDING)
                self.approvals.invalidated(record.call_id, str(refused_receipt))
                return AskAgain(str(refused_receipt), got.state_hash, got.args)
            self._after_write(record, result, self._idempotency_key(spec, got.args))
            return self._executed(record, result)

        done = await self.approvals.until_held(record, call, decision, carry_out)
        if isinstance(done, Rejected):
            result = self._refusal(spec, record.call_id, ErrorCode.REJECTED, done.reason)
            return self._finish(record, CallStatus.REJECTED, result)
        return done

    def _duplicate(
        self, record: CallRecord, spec: ToolSpec, args: dict[str, Any]
    ) -> tuple[CallRecord, ToolResult] | None:
        if self._idempotency_key(spec, args) not in self.executed_writes:
            return None
        message = f"{spec.name} with these arguments already ran in this run; refused"
        result = self._refusal(spec, record.call_id, ErrorCode.DUPLICATE_WRITE, message)
        return self._finish(record, CallStatus.REFUSED_DUPLICATE, result)

    def _edited(self, record: CallRecord, spec: ToolSpec, got: Approved) -> None:
        """The guard sees the edited call too; the model is told what the operator changed."""
        record.args = got.args
        self.guard.admit(guard_key(spec.name, got.args, record.state_hash))
        changed = "; ".join(got.changes)
        self.notes.append(
            f"I edited the arguments of your {spec.name} call ({record.call_id}) before"
            f" approving it; it runs with my arguments. Changed: {changed}"
        )

    def _after_write(self, record: CallRecord, result: ToolResult, idempotency: str) -> None:
        code = result.error.code if result.error else None
        if result.ok or code in (ErrorCode.OUTCOME_UNKNOWN, ErrorCode.INVALID_RESULT):
            self.executed_writes.add(idempotency)
        if code is ErrorCode.OUTCOME_UNKNOWN:  # the operator may say what became of it
            self.unknown.noted(record, idempotency)

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
        approved: Approved | None,
    ) -> ToolResult:
        def on_retry(attempt: int, error: str, delay: float) -> None:
            self.rt.emit(
                ToolRetry,
                run_id=self.run_id,
                call_id=call_id,
                tool=spec.name,
                attempt=attempt,
                error=error,
                delay_s=delay,
            )

        self._record_of(call_id).status = CallStatus.RUNNING
        self.started[call_id] = time.monotonic()
        with reporting(self.rt.emit, self.run_id, call_id, spec.name):  # its progress, live
            return await self.rt.interruptible(
                self.dispatcher.run(
                    spec,
                    call_id,
                    args,
                    receipt=approved.receipt if approved else None,
                    receipt_problem=None if approved is None else self._problem_of(args, approved),
                    on_retry=on_retry,
                    then=self.rt.snapshot_after_tool,
                )
            )

    def _problem_of(
        self, args: dict[str, Any], approved: Approved
    ) -> Callable[[ApprovalReceipt], str | None]:
        """The receipt checked once more as the write is dispatched."""
        return lambda receipt: self.approvals.receipt_problem(receipt, args, approved.state_hash)

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
            ToolFinished,
            run_id=self.run_id,
            call_id=record.call_id,
            tool=record.tool,
            status=status,
            result=record.result,
            duration_ms=result.provenance.duration_ms,
        )
        return record, result


def _result_line(record: CallRecord | None) -> str:
    """An earlier call's status and result, short (the loop question's evidence)."""
    if record is None:
        return ""
    result = "" if record.result is None else short_args(record.result, 100)
    return f"{record.status.value} {result}".strip()
