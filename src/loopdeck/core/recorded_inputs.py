"""What a run takes in, recorded in its log as it comes, and served from the log when the run
is rebuilt (`core/replay_log.py`): the model's replies (`ModelReplied`), the env's state as
seen (`StateSeen`), the tools' results, the operator's decisions and answers.

`record_inputs` puts these between a runtime and what it asks, once it is built: the model,
its reads of the env's state, the dispatcher, the approver and the answerer. Without a log
they only record (and `before_acting`, a worker's lease check, comes before every model call
and tool); with one they serve the log until it has no more, then let the run go on live.
`ReplayBus` is the bus of a rebuilt run: it checks each event against the log and hands it
on only once the run is live (a fork's: always, numbered as the fork's own)."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from datetime import datetime
from functools import partial
from typing import TYPE_CHECKING, Any, cast

from loopdeck.core.approvals import (
    Answer,
    Answerer,
    ApprovalDecision,
    ApprovalReceipt,
    ApprovalRequest,
    Approver,
    StandingDecisions,
)
from loopdeck.core.canonical import sha256_hex
from loopdeck.core.dispatcher import Dispatcher, ReceiptRefused, RetryHook
from loopdeck.core.env_thread import Then
from loopdeck.core.events import E, Event, EventBus, Finding, P, RunStarted
from loopdeck.core.finding_events import listed
from loopdeck.core.model import ModelClient, ModelReply, ModelRequest
from loopdeck.core.replay_events import ModelReplied, RunForked, StateSeen
from loopdeck.core.replay_log import ReplayLog, key
from loopdeck.core.state_reads import Read, Snapshot, StateReads
from loopdeck.core.tools import ToolResult, ToolSpec

if TYPE_CHECKING:
    from loopdeck.core.runtime import Runtime

TAIL = 2  # the last messages of a prompt, whose sha256 `ModelReplied` keeps
BeforeActing = Callable[[], Awaitable[None]]


async def _nothing() -> None:
    return None


class ReplayBus(EventBus):
    """A rebuilt run's bus: while the log has more, each event is checked against it and
    kept from the subscribers (they have it: it is in the store); once live, events go on
    from the log's last number. A fork's (`forward`) writes its own log from its first event,
    numbered as its own, past the events it already has (`already`: a fork rebuilt again)."""

    def __init__(self, *, forward: bool = False, already: int = 0) -> None:
        super().__init__()
        self.log: ReplayLog | None = None
        self.forward = forward
        self.already = already
        self._made = 0
        self.dropping = False  # the run left (its lease lost): what it makes is checked no more
        self._marks: list[tuple[int, Callable[[], None]]] = []  # (`at`)

    def drop(self) -> None:
        """Nothing the run makes from now on is checked or handed on (it is being stopped
        where it is: a kill must not read as a divergence from its log)."""
        self.dropping = True

    def at(self, seq: int, then: Callable[[], None]) -> None:
        """`then()` where the log's event `seq` was made: once the rebuilt run made the last
        compared event before it (a change the env made then, which the log keeps as noise)."""
        self._marks.append((seq, then))
        self._marks.sort(key=lambda mark: mark[0])

    def _passed(self, log: ReplayLog) -> None:
        expected = log.next()
        while self._marks and (expected is None or self._marks[0][0] < expected.seq):
            self._marks.pop(0)[1]()

    def follow(self, log: ReplayLog) -> None:
        self.log = log
        if not self.forward:
            log.on_live.insert(0, lambda: setattr(self, "_seq", log.last_seq))

    def emit(self, make: Callable[P, E], /, *args: P.args, **kwargs: P.kwargs) -> E:
        log = self.log
        if self.dropping:
            self._made += 1
            dropped: E = cast(Any, make)(*args, **kwargs, seq=self._made)
            return dropped
        if log is None or (log.diverged is None and log.live and not self.forward):
            return super().emit(make, *args, **kwargs)
        if log.diverged is None and self.forward and self._seq >= self.already:
            if not log.live and "at" not in kwargs:
                kwargs["at"] = _when_made(log, cast(Any, make)(*args, **kwargs, seq=0))
            event = super().emit(make, *args, **kwargs)
            if not log.live:
                log.matched(event)
                self._passed(log)
            return event
        # Kept from the subscribers: rebuilding a run, a fork's events its log has, or a run
        # that did something else than its log (it stops: nothing more of it is kept).
        if self.forward:
            self._seq += 1
            seq = self._seq
        else:
            self._made += 1
            seq = self._made
        made: E = cast(Any, make)(*args, **kwargs, seq=seq)
        if log.diverged is None:
            log.matched(made)
            self._passed(log)
        return made


def _when_made(log: ReplayLog, made: Event) -> datetime:
    """When a fork's rebuilt event happened: the source's time for what the source made (an
    approval decided by its operator then, not now), now for the fork's start and for what
    the log has no match of."""
    expected = log.next()
    if isinstance(made, RunStarted) or expected is None or key(made) is None:
        return made.at
    return expected.at if key(made) == key(expected) else made.at


class RecordedModel:
    """The run's model, its replies recorded whole (`ModelReplied`) and, while the log has
    them, served from it: no call, no cost."""

    def __init__(self, inner: ModelClient, runtime: Runtime, log: ReplayLog | None,
                 before_acting: BeforeActing) -> None:  # fmt: skip
        self.inner = inner
        self.rt = runtime
        self.log = log
        self.before_acting = before_acting
        self.name = inner.name
        self.context_window = getattr(inner, "context_window", None)

    def __getattr__(self, name: str) -> Any:  # `count_tokens`, `prepare`: as the model has
        return getattr(self.inner, name)

    async def complete(self, request: ModelRequest) -> ModelReply:
        asked_after = self.rt.bus.last_seq
        log = self.log
        if log is not None and not log.live:
            reply = log.model_reply()
        else:
            if self.before_acting is not _nothing:
                await self.before_acting()
            reply = await self.inner.complete(request)
        self.rt.emit(
            ModelReplied, run_id=self.rt.config.run_id, role=request.role, round=request.round,
            asked_after=asked_after, messages=len(request.messages),
            tail_sha256=sha256_hex(request.messages[-TAIL:]), reply=reply.model_dump(),
        )  # fmt: skip
        return reply


class RecordedReads(StateReads):
    """The run's reads of its env's state, each change recorded (`StateSeen`) and, while
    the log has them, served from it: the rebuilt run sees what the run saw."""

    log: ReplayLog | None
    _emit: Any
    _run_id: str
    _last: Read | None
    _noted: str | None
    _noted_fingerprint: str | None

    def recording(self, runtime: Runtime, log: ReplayLog | None) -> None:
        self.log, self._emit, self._run_id = log, runtime.emit, runtime.config.run_id
        self._last = self._noted = self._noted_fingerprint = None

    def read(self) -> Read:
        log = self.log
        if log is not None and not log.live and (served := log.read()) is not None:
            self._last = served
            return served
        read = super().read()
        self._last = read
        return read

    def read_ahead(self) -> None:
        log = self.log  # a read served from the log is taken in the log's order: not early
        if log is None or log.live:
            super().read_ahead()

    def _note(self) -> None:
        last = self._last
        if last is not None and last[1] != self._noted:
            self._noted = last[1]
            self._emit(StateSeen, run_id=self._run_id, fingerprint=last[1], snapshot=last[0])

    async def snapshot(self) -> Snapshot:
        snapshot = await super().snapshot()
        self._note()
        return snapshot

    async def after_tool(self) -> Read:
        read = await super().after_tool()
        self._note()
        return read

    async def state_hash(self) -> str:
        if not self._own_fingerprint:
            fingerprint = await super().state_hash()
            self._note()
            return fingerprint
        log = self.log
        served = log.fingerprint() if log is not None and not log.live else None
        if served is not None:
            self.reads += 1
            fingerprint = served
        else:
            fingerprint = await super().state_hash()
        if fingerprint != self._noted_fingerprint:
            self._noted_fingerprint = fingerprint
            self._emit(StateSeen, run_id=self._run_id, fingerprint=fingerprint, snapshot=None)
        return fingerprint


class ReplayDispatcher(Dispatcher):
    """A tool's recorded result while the log has it (checked as a dispatch checks it: the
    receipt, the state's reads told), a write in flight when the log ends its unknown
    outcome; otherwise the call runs, after `before_acting`."""

    def __init__(self, inner: Dispatcher, log: ReplayLog | None, before_acting: BeforeActing):
        super().__init__(inner.backoff_s, inner.result_char_cap, inner.env_thread)
        self.state_reads = inner.state_reads
        self.log = log
        self.before_acting = before_acting

    async def run(
        self,
        spec: ToolSpec,
        call_id: str,
        args: dict[str, Any],
        *,
        receipt: ApprovalReceipt | None = None,
        receipt_problem: Callable[[ApprovalReceipt], str | None] | None = None,
        on_retry: RetryHook | None = None,
        then: Then | None = None,
    ) -> ToolResult:
        served = None if self.log is None else self.log.tool_result(spec, call_id)
        if served is None:
            if self.before_acting is not _nothing:
                await self.before_acting()
            return await super().run(spec, call_id, args, receipt=receipt,
                                     receipt_problem=receipt_problem, on_retry=on_retry,
                                     then=then)  # fmt: skip
        if spec.risk == "write":
            if receipt is None or receipt_problem is None:
                raise ReceiptRefused(f"{spec.name} is a write and has no approval receipt")
            if (problem := receipt_problem(receipt)) is not None:
                raise ReceiptRefused(problem)
        if self.state_reads is not None:
            self.state_reads.before_tool(spec, then)
        return served


Decided = Callable[[datetime | None], None]  # told when a live decision or answer was made


class ReplayApprover:
    """The operator's recorded decisions while the log has them; then the run's approver."""

    def __init__(self, inner: Approver, log: ReplayLog, decided: Decided) -> None:
        self.inner, self.log, self.decided = inner, log, decided

    async def ask(self, request: ApprovalRequest) -> ApprovalDecision:
        if not self.log.live:
            return self.log.decision(request)
        decision = await self.inner.ask(request)
        self.decided(decision.decided_at)
        return decision

    def as_logged(self, request: ApprovalRequest) -> ApprovalRequest:
        return self.log.asked_as(request)

    async def standing(self, request: ApprovalRequest) -> ApprovalDecision | None:
        if not self.log.live:
            return self.log.standing(request)
        inner = self.inner
        return await inner.standing(request) if isinstance(inner, StandingDecisions) else None


class ReplayAnswerer:
    """The operator's recorded answers while the log has them; then the run's answerer."""

    def __init__(self, inner: Answerer, log: ReplayLog, decided: Decided) -> None:
        self.inner, self.log, self.decided = inner, log, decided

    async def answer(self, run_id: str, question_id: str, question: str) -> Answer:
        if not self.log.live:
            return self.log.answer(question_id)
        answer = await self.inner.answer(run_id, question_id, question)
        self.decided(answer.decided_at)
        return answer


def record_inputs(
    runtime: Runtime, log: ReplayLog | None = None, before_acting: BeforeActing = _nothing
) -> None:
    """The runtime's inputs recorded (and with `log`, served from it until it has no more),
    `before_acting` awaited before every model call and tool; called once, before it runs."""
    runtime.model = cast(ModelClient, RecordedModel(runtime.model, runtime, log, before_acting))
    reads = runtime.state_reads
    reads.__class__ = RecordedReads  # the same object: the dispatcher holds it too
    assert isinstance(reads, RecordedReads)
    reads.recording(runtime, log)
    if log is not None:  # what was read while rebuilding is not the env as it is now
        log.on_live.append(reads.forget)
    runtime.calls.dispatcher = ReplayDispatcher(runtime.calls.dispatcher, log, before_acting)
    if log is None:
        return
    approvals = runtime.calls.approvals
    decided = runtime.ledger.decided
    approvals.approver = ReplayApprover(approvals.approver, log, decided)
    if runtime.answerer is not None:
        runtime.answerer = ReplayAnswerer(runtime.answerer, log, decided)
    log.outside = lambda event: _done_again(runtime, event)
    if isinstance(runtime.bus, ReplayBus):  # the tools its env's outside made writes
        for said in log.events:
            if isinstance(said, Finding) and said.raised is not None:
                runtime.bus.at(said.seq, partial(_raised_again, runtime, runtime.bus, said))
    log.on_live.append(lambda: _clock_as_recorded(runtime, log))
    forked = None if log.free else log.last_of(RunForked)
    if forked is not None:  # a fork moved: what its restored state settled stays settled
        log.on_live.append(lambda: runtime.calls.unknown.settle(forked.settled))


def _raised_again(runtime: Runtime, bus: ReplayBus, said: Finding) -> None:
    """At the place of the log's finding `said` that a tool was made a write: made one again
    (`Environment.risk_raised_again`), its finding in the outcome again. A fork's own log
    has it said again here, at once (the rebuild is on the run's loop): in its place, before
    the next event. A plain rebuild's log has it already: not said again."""
    assert said.raised is not None
    runtime.tools.update(runtime.env.risk_raised_again(said.raised))
    runtime.findings.append(listed(said.round, said.text))
    if bus.forward:
        runtime.emit(
            Finding,
            run_id=runtime.config.run_id,
            round=said.round,
            text=said.text,
            raised=said.raised,
        )


def _clock_as_recorded(runtime: Runtime, log: ReplayLog) -> None:
    """The agent's time and the operator's as the log last had them: a rebuilt run is
    charged what the run had spent, not the moments its rebuilding took (nor the time no
    worker ran it). A fork's (`log.free`: its source's log) are its own, from naught as it
    goes live: the time its source spent is the source's, as its tokens and cost are.

    A log that ends while the operator was waited on (the run parked, or its worker lost
    mid-wait) has that wait's start, not its end: the wait is the operator's from its start
    up to the decision, when the store says when it came before the run was taken up here,
    else up to now (the move) and on as the rebuilt run waits (`BudgetLedger.carry_hold`)."""
    from loopdeck.core.budgets import Cap
    from loopdeck.core.events import BudgetUpdated

    agent_s = operator_s = 0.0
    last = None
    if not log.free:
        last = log.last_of(BudgetUpdated)
        if last is None:
            return
        agent_s = float(last.usage[Cap.DEADLINE][0])  # the clock is always known
        operator_s = last.operator_s
    ledger = runtime.ledger
    ledger._operator_s = operator_s
    ledger.started = time.monotonic() - agent_s - ledger.operator_s()
    if last is not None and last.held is not None:
        ledger.carry_hold(last.at)
    runtime.rearm_deadline()


def _done_again(runtime: Runtime, event: Any) -> None:
    """What came from outside the run's task, done again in the rebuilt run."""
    from loopdeck.core.events import GrantRevoked, OperatorCommand, OperatorMessage

    if isinstance(event, OperatorMessage):
        runtime.message(event.text, by=event.by)
    elif isinstance(event, OperatorCommand):
        if event.command == "cancel":
            runtime.cancel(after_current_tools=True, by=event.by)
        elif event.command == "kill":
            runtime.kill(by=event.by)
        elif event.command == "pause":
            runtime.pause(by=event.by)
        else:
            runtime.resume(by=event.by)
    elif isinstance(event, GrantRevoked):
        runtime.revoke(event.grant_id, by=event.by)
    else:
        runtime.resolve(event.call_id, event.applied, by=event.by)
