"""What an operator sees of one run, folded from its events. No Textual, no SQLite.
The console renders it; a replay or an attached console can fold stored events into it too."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import TypeVar, cast

from loopdeck.caps import Cap
from loopdeck.core.budgets import CapUsage
from loopdeck.core.events import (
    ApprovalDecided,
    ApprovalRequested,
    ApprovalWithdrawn,
    BudgetUpdated,
    CallProposed,
    CallStatus,
    ContextCompacted,
    DecisionMade,
    Event,
    EventBase,
    Finding,
    GrantGiven,
    GrantRevoked,
    GuardTripped,
    ModelRetry,
    OperatorCommand,
    OperatorMessage,
    OutcomeResolved,
    PlanWritten,
    QuestionAnswered,
    QuestionAsked,
    RecordingHeld,
    RecordingResumed,
    ReviewVerdict,
    RunCorrected,
    RunStarted,
    RunStopped,
    StateChanged,
    ToolFinished,
    ToolProgress,
    ToolRetry,
    UnrequestedChange,
)
from loopdeck.core.outcome import CallRecord, left_open
from loopdeck.core.push_events import DecisionsPushed, PushFailed
from loopdeck.core.recording import outage_text, outage_words
from loopdeck.core.replay_events import RunForked, RunMoved
from loopdeck.core.states import RunState
from loopdeck.operator.context_words import context_text
from loopdeck.operator.decided_words import decided_words, resolved_words
from loopdeck.operator.grant_book import GrantBook
from loopdeck.operator.move_words import forked_words, move_words
from loopdeck.operator.push_words import take_push
from loopdeck.operator.run_findings import RunFindings

MAX_CALL_ROWS = 500

E = TypeVar("E", bound=EventBase)
Handler = Callable[["RunView", E], None]  # what one class's events do to the view

# One handler per event class, found by the event's class (a long load folds 100,000 events).
VIEW_HANDLERS: dict[type[EventBase], Handler[Event]] = {}


def _handles(cls: type[E]) -> Callable[[Handler[E]], Handler[E]]:
    """Makes a `RunView` method the handler of `cls`'s events (typed for that class)."""

    def register(handler: Handler[E]) -> Handler[E]:
        VIEW_HANDLERS[cls] = cast(Handler[Event], handler)  # called only with a `cls` event
        return handler

    return register


@dataclass
class RunView:
    run_id: str = ""
    env: str = ""
    script: str | None = None
    model: str = ""
    mode: str = ""
    goal: str = ""
    started_at: datetime | None = None
    state: RunState = RunState.READY
    entries: dict[RunState, int] = field(default_factory=dict)
    transitions: int = 0
    plans: dict[int, list[str]] = field(default_factory=dict)
    round: int = 0
    plan_step: int | None = None
    calls: OrderedDict[str, CallRecord] = field(default_factory=OrderedDict)
    calls_seen: int = 0
    calls_dropped: int = 0
    repeats: int = 0
    last_budget: BudgetUpdated | None = None  # `caps` read from it when drawn, not when folded
    fired_cap: Cap | None = None
    # What the run noticed: the Findings panel's (review verdicts, findings, unrequested changes).
    findings: RunFindings = field(default_factory=RunFindings)
    stop_reason: str | None = None
    stop_detail: str = ""
    stopped_at: datetime | None = None
    paused: bool = False
    notes: list[str] = field(default_factory=list)
    max_call_rows: int = MAX_CALL_ROWS
    changed_calls: set[str] = field(default_factory=set)
    model_retries: int = 0
    last_model_error: str = ""
    compactions: int = 0
    last_compaction: tuple[int, int] | None = None
    # The model's input window (RunStarted); None once started: unknown, nothing is compacted.
    context_window: int | None = None
    # An agent's own window as it says it (tokens in it, its size): its fill, never spent.
    window: tuple[int, int] | None = None
    # The agent's clock as of the last budget event; `held` names an operator wait going on.
    agent_s: float = 0.0
    operator_s: float = 0.0
    held: str | None = None
    clock_at: datetime | None = None
    decided: dict[str, str] = field(default_factory=dict)
    tool_running: str = ""
    # The run holds because its store cannot take writes: what the header says of it.
    store_outage: str = ""
    # The questions waiting (how each is put); the call the guard holds while one is about it.
    questions: dict[str, QuestionAsked] = field(default_factory=dict)
    guard_held: str | None = None
    # The run's standing grants, and its writes whose outcome waits for the operator's word.
    grants: GrantBook = field(default_factory=GrantBook)
    unknown: dict[str, str] = field(default_factory=dict)  # call id -> tool
    pushed: dict[str, str] = field(default_factory=dict)  # call or question id -> its push
    host: str = ""  # where a worker runs it; its last move; what it was forked from
    moved: str = ""
    forked: str = ""
    _live_state: RunState = RunState.READY

    @property
    def caps(self) -> dict[Cap, CapUsage]:
        """Each cap's use and limit as the last budget event said: made when read, not folded."""
        return self.last_budget.caps() if self.last_budget is not None else {}

    @property
    def finished(self) -> bool:
        return self.stop_reason is not None

    def times(self, now: datetime | None) -> tuple[float, float]:
        """(agent's time, operator's time) at `now`: the last budget event's, run forward."""
        if self.clock_at is None or now is None:
            return self.agent_s, self.operator_s
        end = min(now, self.stopped_at) if self.stopped_at else now
        since = 0.0 if self.finished else max(0.0, (end - self.clock_at).total_seconds())
        if self.held:
            return self.agent_s, self.operator_s + since
        return self.agent_s + since, self.operator_s

    @property
    def shown_state(self) -> str:
        """What the header calls the run now: its stop reason, `paused`, or its state."""
        if self.stop_reason:
            return self.stop_reason
        if self.paused:
            return "paused" if self.held == "paused" else "pausing"
        return self.state.value

    @property
    def context_note(self) -> str:
        """The model's window in a line for the budgets panel: unknown, or what compaction did."""
        if self.started_at is None:
            return ""
        if self.window is not None:
            return f"the agent's window: {self.window[0]:,} of {self.window[1]:,} tokens"
        text = context_text(self.context_window, self.compactions, self.last_compaction)
        return text.removeprefix("context ")

    def apply(self, event: Event) -> None:
        handler = VIEW_HANDLERS.get(type(event))
        if handler is not None:
            handler(self, event)

    @_handles(RunStarted)
    def _on_run_started(self, e: RunStarted) -> None:
        self.run_id, self.env, self.script, self.model = e.run_id, e.env, e.script, e.model
        self.mode, self.goal, self.started_at = e.mode, e.goal, e.at
        self.context_window = e.context_window

    @_handles(StateChanged)
    def _on_state_changed(self, e: StateChanged) -> None:
        self.state = e.target
        self.entries[e.target] = self.entries.get(e.target, 0) + 1
        self.transitions += 1
        if e.target is RunState.PLANNING:
            self.round += 1
            self.plan_step = None

    @_handles(PlanWritten)
    def _on_plan_written(self, e: PlanWritten) -> None:
        self.plans[e.round] = list(e.steps)
        self.round = e.round

    @_handles(DecisionMade)
    def _on_decision_made(self, e: DecisionMade) -> None:
        if e.plan_step is not None:
            self.plan_step = e.plan_step
        if self.mode == "react":
            self.round = e.round

    @_handles(CallProposed)
    def _on_call_proposed(self, e: CallProposed) -> None:
        self.calls_seen += 1
        self.tool_running = e.tool
        self.calls[e.call_id] = CallRecord(
            e.call_id, e.round, e.tool, e.args, e.risk, e.fingerprint, e.state_hash,
            risk_source=e.risk_source,
        )  # fmt: skip
        self.changed_calls.add(e.call_id)
        while len(self.calls) > self.max_call_rows:
            dropped, _ = self.calls.popitem(last=False)
            self.changed_calls.add(dropped)
            self.calls_dropped += 1

    def _row(self, call_id: str) -> CallRecord | None:
        row = self.calls.get(call_id)
        if row is not None:
            self.changed_calls.add(call_id)
        return row

    @_handles(ApprovalRequested)
    def _on_approval_requested(self, e: ApprovalRequested) -> None:
        if e.call_id == self.guard_held:
            self.guard_held = None
        if row := self._row(e.call_id):
            row.status = CallStatus.PENDING_APPROVAL

    @_handles(ApprovalDecided)
    def _on_approval_decided(self, e: ApprovalDecided) -> None:
        self.decided[e.call_id] = decided_words(e, self.pushed.get(e.call_id))
        self.grants.take(e)
        if (row := self._row(e.call_id)) and e.args is not None:
            row.args = e.args
        if row and e.approved and row.status in (CallStatus.PENDING_APPROVAL, CallStatus.PROPOSED):
            row.status = CallStatus.RUNNING  # carried out now (asked again: pending again)

    @_handles(DecisionsPushed)
    def _on_decisions_pushed(self, e: DecisionsPushed) -> None:
        take_push(e, self.pushed, self.decided, self._row)

    @_handles(PushFailed)
    def _on_push_failed(self, e: PushFailed) -> None:
        take_push(e, self.pushed, self.decided, self._row)

    @_handles(GrantGiven)
    def _on_grant_given(self, e: GrantGiven) -> None:
        self.grants.take(e)

    @_handles(GrantRevoked)
    def _on_grant_revoked(self, e: GrantRevoked) -> None:
        self.grants.take(e)

    @_handles(OutcomeResolved)
    def _on_outcome_resolved(self, e: OutcomeResolved) -> None:
        self.unknown.pop(e.call_id, None)
        if row := self._row(e.call_id):
            row.status = CallStatus.EXECUTED if e.applied else CallStatus.FAILED
        self.decided[e.call_id] = resolved_words(self.decided.get(e.call_id, ""), e)

    @_handles(ApprovalWithdrawn)
    def _on_approval_withdrawn(self, e: ApprovalWithdrawn) -> None:
        if row := self._row(e.call_id):
            row.status = CallStatus.WITHDRAWN

    @_handles(ToolRetry)
    def _on_tool_retry(self, e: ToolRetry) -> None:
        if row := self._row(e.call_id):
            row.retries = e.attempt

    @_handles(ToolProgress)
    def _on_tool_progress(self, e: ToolProgress) -> None:
        if row := self._row(e.call_id):
            row.progress = e

    @_handles(ToolFinished)
    def _on_tool_finished(self, e: ToolFinished) -> None:
        if e.call_id == self.guard_held:
            self.guard_held = None
        if row := self._row(e.call_id):
            row.status, row.progress = e.status, None
            if e.result:
                row.result = e.result
                row.duration_ms = e.duration_ms
        if e.status is CallStatus.BLOCKED_REPEAT:
            self.repeats += 1
        if e.status is CallStatus.OUTCOME_UNKNOWN:
            self.unknown[e.call_id] = e.tool

    @_handles(GuardTripped)
    def _on_guard_tripped(self, e: GuardTripped) -> None:
        self.guard_held = e.call_id
        self.changed_calls.add(e.call_id)

    @_handles(QuestionAsked)
    def _on_question_asked(self, e: QuestionAsked) -> None:
        self.questions[e.question_id] = e

    @_handles(QuestionAnswered)
    def _on_question_answered(self, e: QuestionAnswered) -> None:
        self.questions.pop(e.question_id, None)

    @_handles(BudgetUpdated)
    def _on_budget_updated(self, e: BudgetUpdated) -> None:
        self.last_budget = e
        deadline = e.usage.get(Cap.DEADLINE.value)  # as `caps` reads it: (reported, limit)
        self.agent_s = float(deadline[0]) if deadline is not None else 0.0
        self.operator_s, self.held, self.clock_at = e.operator_s, e.held, e.at
        if e.window_used is not None and e.window_size is not None:
            self.window = (e.window_used, e.window_size)

    @_handles(UnrequestedChange)
    def _on_unrequested_change(self, e: UnrequestedChange) -> None:
        self.findings.take(e)
        self.notes.append(self.findings.unrequested[-1])

    @_handles(ReviewVerdict)
    def _on_review_verdict(self, e: ReviewVerdict) -> None:
        self.findings.take(e)

    @_handles(Finding)
    def _on_finding(self, e: Finding) -> None:
        self.findings.take(e)

    @_handles(ModelRetry)
    def _on_model_retry(self, e: ModelRetry) -> None:
        self.model_retries += 1
        self.last_model_error = e.error

    @_handles(ContextCompacted)
    def _on_context_compacted(self, e: ContextCompacted) -> None:
        self.compactions += 1
        self.last_compaction = (e.tokens_before, e.tokens_after)

    @_handles(OperatorCommand)
    def _on_operator_command(self, e: OperatorCommand) -> None:
        if e.command == "pause":
            self.paused = True
        elif e.command == "resume":
            self.paused = False
        self.notes.append(f"{e.command} by {e.by}")

    @_handles(OperatorMessage)
    def _on_operator_message(self, e: OperatorMessage) -> None:
        self.notes.append(f"message by {e.by}")

    @_handles(RunMoved)
    def _on_run_moved(self, e: RunMoved) -> None:
        self.host, self.moved = e.host, move_words(e)

    @_handles(RunForked)
    def _on_run_forked(self, e: RunForked) -> None:
        self.forked = forked_words(e)
        for call_id in e.settled:  # its restored state holds their outcome: nothing to resolve
            self.unknown.pop(call_id, None)

    @_handles(RunCorrected)
    def _on_run_corrected(self, e: RunCorrected) -> None:
        if self.stop_reason == "crashed":  # a reader's crash mark undone by its runner
            self.state, self.stop_reason, self.stop_detail = self._live_state, None, ""
            self.stopped_at = None
        self.notes.append(e.detail)

    @_handles(RecordingHeld)
    def _on_recording_held(self, e: RecordingHeld) -> None:
        self.store_outage = outage_text(e.cause, e.since, e.spill)

    @_handles(RecordingResumed)
    def _on_recording_resumed(self, e: RecordingResumed) -> None:
        self.store_outage = ""
        self.notes.append(f"{outage_words(e.cause)}: held {e.held_s:.1f} s, resumed")

    @_handles(RunStopped)
    def _on_run_stopped(self, e: RunStopped) -> None:
        self.store_outage = ""
        self._live_state = self.state
        self.state = e.state
        self.stop_reason = e.stop_reason.value
        self.stop_detail = e.detail
        self.stopped_at = e.at
        self.paused = False
        self.questions.clear()
        self.grants.ended(self.run_id)
        if self.guard_held is not None:
            self.changed_calls.add(self.guard_held)
            self.guard_held = None
        for row in left_open(self.calls.values()):  # a stop no runtime recorded (kill -9)
            self.changed_calls.add(row.call_id)
            if row.status is CallStatus.OUTCOME_UNKNOWN:
                self.unknown[row.call_id] = row.tool
        for cap in Cap:
            if cap.stops_as == self.stop_reason and cap in self.caps:
                self.fired_cap = cap
