"""The run's transcript: what the operator reads to judge it, folded from its events.

Every entry is whole: the goal, plans, each model turn's text, each call with its full
arguments and its normalized result (the runtime's truncation mark is the only cut),
approvals with who, when and why, guard trips, review verdicts, findings and the stop's full
detail. No Textual: the console renders entries, tests read them."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from datetime import datetime
from typing import TypeVar, cast

from loopdeck.core.decided_by import DecidedBy
from loopdeck.core.events import (
    ApprovalDecided,
    ApprovalInvalidated,
    ApprovalRequested,
    ApprovalWithdrawn,
    CallProposed,
    ContextCompacted,
    DecisionInvalid,
    DecisionMade,
    Event,
    EventBase,
    Finding,
    GrantGiven,
    GrantRevoked,
    GuardTripped,
    ModelCalled,
    ModelRetry,
    OperatorCommand,
    OperatorMessage,
    OutcomeResolved,
    PlanWritten,
    PolicyDecided,
    PolicyInForce,
    QuestionAnswered,
    QuestionAsked,
    RecordingHeld,
    RecordingResumed,
    ReviewVerdict,
    RunCorrected,
    RunStarted,
    RunStopped,
    ToolFinished,
    ToolProgress,
    ToolRetry,
    UnrequestedChange,
)
from loopdeck.core.grant_rules import GrantRule
from loopdeck.core.push_events import DecisionsPushed, PushFailed
from loopdeck.core.recording import outage_text, outage_words
from loopdeck.core.replay_events import RunForked, RunMoved
from loopdeck.core.text import short_args, visible, visible_json
from loopdeck.operator.move_words import forked_entry, moved_entry
from loopdeck.operator.push_words import failed_push_entry, pushed_entry
from loopdeck.operator.run_findings import finding_entry, unrequested_entry

MAX_ENTRIES = 5000


def clock_text(at: datetime) -> str:
    """A moment as the operator's local time of day."""
    return at.astimezone().strftime("%H:%M:%S")


def ms_text(ms: float) -> str:
    return f"{ms:,.0f} ms"


Body = str | Callable[[], str]
Made = tuple[str, str, Body]
E = TypeVar("E", bound=EventBase)
Maker = Callable[[E], Made]  # one class's events' entry

# One entry maker per event class the operator reads (from the event alone), by its class.
ENTRY_MAKERS: dict[type[EventBase], Maker[Event]] = {}


def _makes(cls: type[E]) -> Callable[[Maker[E]], Maker[E]]:
    """Makes a function the entry maker of `cls`'s events (typed for that class)."""

    def register(maker: Maker[E]) -> Maker[E]:
        ENTRY_MAKERS[cls] = cast(Maker[Event], maker)  # called only with a `cls` event
        return maker

    return register


class Entry:
    """One thing the operator reads, made from its event the first time it is read: a
    runaway's entries that scroll out of the bounded transcript unread cost a reference."""

    __slots__ = ("_event", "_handler", "_made")

    def __init__(self, event: Event, handler: Maker[Event]) -> None:
        self._event = event
        self._handler = handler
        self._made: tuple[str, str, str] | None = None

    @property
    def seq(self) -> int:
        return self._event.seq

    @property
    def at(self) -> datetime:
        return self._event.at

    def _words(self) -> tuple[str, str, str]:
        if self._made is None:
            kind, title, body = self._handler(self._event)
            self._made = (kind, visible(title), visible(body if isinstance(body, str) else body()))
        return self._made

    @property
    def kind(self) -> str:
        """goal, plan, model, decision, call, approval, result, guard, review, finding, stop
        or note."""
        return self._words()[0]

    @property
    def title(self) -> str:
        return self._words()[1]

    @property
    def body(self) -> str:
        return self._words()[2]

    @property
    def text(self) -> str:
        return f"{self.title}\n{self.body}" if self.body else self.title


class Transcript:
    """A bounded fold of events into entries; `dropped` counts the oldest ones let go."""

    def __init__(self, max_entries: int = MAX_ENTRIES) -> None:
        self.entries: deque[Entry] = deque(maxlen=max_entries)
        self.dropped = 0

    def apply(self, event: Event) -> Entry | None:
        """The event's entry, if the operator reads its kind; its words made when first read."""
        handler = ENTRY_MAKERS.get(type(event))
        if handler is None:
            return None
        entry = Entry(event, handler)
        if len(self.entries) == self.entries.maxlen:
            self.dropped += 1
        self.entries.append(entry)
        return entry


# -- one entry maker per event class that the operator reads ---------------------------------
@_makes(RunStarted)
def _run_started(e: RunStarted) -> Made:
    script = f"/{e.script}" if e.script else ""
    return "goal", f"goal · run {e.run_id} · {e.env}{script} · {e.model} · {e.mode}", e.goal


@_makes(PlanWritten)
def _plan_written(e: PlanWritten) -> Made:
    steps = "\n".join(f"{i}. {step}" for i, step in enumerate(e.steps, 1))
    return "plan", f"plan · round {e.round}", steps


@_makes(ModelCalled)
def _model_called(e: ModelCalled) -> Made:
    tokens = "unknown" if e.tokens_unknown else f"{e.prompt_tokens + e.completion_tokens:,}"
    title = f"{e.role} said · round {e.round} · {tokens} tokens · {ms_text(e.latency_ms)}"
    return "model", title, e.content or "(no text)"


@_makes(DecisionMade)
def _decision_made(e: DecisionMade) -> Made:
    step = f" · plan step {e.plan_step}" if e.plan_step is not None else ""
    return "decision", f"decision · {e.decision} · {e.reason_code or '-'}{step}", e.message


@_makes(DecisionInvalid)
def _decision_invalid(e: DecisionInvalid) -> Made:
    title = f"reply not usable · correction {e.corrections_used}"
    return "guard", title, e.error


@_makes(CallProposed)
def _call_proposed(e: CallProposed) -> Made:
    title = (
        f"call {e.call_id} · {e.tool}({short_args(e.args, 60)}) · {e.risk} · "
        f"fingerprint {e.fingerprint[:12]} · state {e.state_hash[:12]}"
    )
    return "call", title, lambda: visible_json(e.args)


@_makes(ApprovalRequested)
def _approval_requested(e: ApprovalRequested) -> Made:
    lines = [f"rationale: {e.rationale or 'no text'}"]
    if e.plan_step:
        lines.append(f"plan step: {e.plan_step}")
    if e.asked_again:
        lines.append(f"asked again: {e.asked_again}")
    if e.asked_by is not None:
        lines.append(f"asked by {e.asked_by.with_why()}")
    expires = clock_text(e.expires_at)
    return (
        "approval",
        f"approval asked · {e.call_id} · {e.tool} · expires {expires}",
        ("\n".join(lines)),
    )


@_makes(ApprovalDecided)
def _approval_decided(e: ApprovalDecided) -> Made:
    """Who decided (a grant says itself: "grant g1, granted by …"), and an edit field by
    field: what the call runs with instead of what the model proposed."""
    verb = "approved" if e.approved else "rejected"
    edited = " (edited)" if e.changes else ""
    lines = [] if e.approved else [f"reason: {e.reason or '(none)'}"]
    if e.grant_id:
        lines.append(f"not asked: standing grant {e.grant_id} covers it")
    if e.decided_by is not None and e.decided_by.who == "rule":
        rule = e.decided_by
        lines.append(f"not asked: rule {rule.rule_id} of the {rule.level} policy decides it"
                     f" (sha256 {rule.policy_sha256})")  # fmt: skip
    if e.changes:
        lines += ["edited by the operator:", *(f"  {change}" for change in e.changes)]
    return (
        "approval",
        f"{verb}{edited} · {e.call_id} · by {e.by} at {clock_text(e.at)}",
        ("\n".join(lines)),
    )


@_makes(PolicyInForce)
def _policy_in_force(e: PolicyInForce) -> Made:
    levels = "\n".join(
        f"{level['level']}: {level['path']} ({level['mode']}, sha256 {level['sha256']})"
        for level in e.levels
    )
    return "approval", f"policy in force · sha256 {e.sha256[:12]}", levels


@_makes(PolicyDecided)
def _policy_decided(e: PolicyDecided) -> Made:
    """What the policy decided on one ask, and what its shadow levels would have."""
    title = f"policy · {e.call_id} · {_ruled(e.effect, e.decided_by)}"
    lines = []
    if (e.would, e.would_by) != (e.effect, e.decided_by):
        lines.append(f"shadow: would {_ruled(e.would, e.would_by)}")
    if e.matched:
        lines.append(f"rules that hold: {', '.join(e.matched)}")
    lines += [f"could not be evaluated: {error}" for error in e.errors]
    if e.grant_id:
        lines.append(f"standing grant {e.grant_id} covers it (it decides where no rule does)")
    return "approval", title, "\n".join(lines)


def _ruled(effect: str, by: DecidedBy | None) -> str:
    return f"{effect} by {by.with_why()}" if by else "no rule decides: the operator does"


@_makes(GrantGiven)
def _grant_given(e: GrantGiven) -> Made:
    rule = GrantRule.model_validate({"scope": e.scope, "fields": e.fields, "uses": e.uses})
    until = f", until {clock_text(e.expires_at)}" if e.expires_at else ""
    title = f"granted {e.grant_id}: {e.tool}, {rule.words()}{until}, by {e.by}"
    body = f"given with the approval of {e.call_id}: later calls it covers are not asked"
    if e.scope == "exact":
        body += f"\narguments: {short_args(e.args, 200)}"
    return "approval", title, body


@_makes(GrantRevoked)
def _grant_revoked(e: GrantRevoked) -> Made:
    title = f"grant revoked · {e.grant_id} · by {e.by} at {clock_text(e.at)}"
    return "approval", title, "later calls it covered are asked again"


@_makes(OutcomeResolved)
def _outcome_resolved(e: OutcomeResolved) -> Made:
    said = "applied" if e.applied else "not applied"
    title = f"outcome resolved · {e.call_id} · {e.tool} · {said} · by {e.by} at {clock_text(e.at)}"
    body = (
        "recorded as executed: it took effect"
        if e.applied
        else "recorded as failed: it did not take effect; the model may propose it again,"
        " asked again"
    )
    return "approval", title, body


@_makes(ApprovalInvalidated)
def _approval_invalidated(e: ApprovalInvalidated) -> Made:
    return "approval", f"approval no longer valid · {e.call_id} · asked again", e.problem


@_makes(ApprovalWithdrawn)
def _approval_withdrawn(e: ApprovalWithdrawn) -> Made:
    return "approval", f"approval withdrawn · {e.call_id} · the run stopped", ""


NO_ANSWER = "nobody answered in time: the run went on alone (the guard blocked the call)"
_makes(DecisionsPushed)(pushed_entry)  # a push of decisions: `operator/push_words.py`
_makes(PushFailed)(failed_push_entry)
_makes(RunMoved)(moved_entry)  # a run's moves: `operator/move_words.py`
_makes(RunForked)(forked_entry)


@_makes(QuestionAsked)
def _question_asked(e: QuestionAsked) -> Made:
    who = e.title.lower() if e.title else "the agent asks you"
    return "approval", f"{who} · {e.question_id}", e.question


@_makes(QuestionAnswered)
def _question_answered(e: QuestionAnswered) -> Made:
    when = clock_text(e.at)
    if e.by == "timeout":
        return "approval", f"no answer in time · {e.question_id} · at {when}", NO_ANSWER
    return "approval", f"answered · {e.question_id} · by {e.by} at {when}", e.answer


@_makes(ToolRetry)
def _tool_retry(e: ToolRetry) -> Made:
    return "note", f"retry {e.attempt} · {e.call_id} · {e.tool} in {e.delay_s:g} s", e.error


@_makes(ToolProgress)
def _tool_progress(e: ToolProgress) -> Made:
    return "call", f"progress {e.call_id} · {e.tool} · {e.words()}", ""


@_makes(ToolFinished)
def _tool_finished(e: ToolFinished) -> Made:
    title = f"result {e.call_id} · {e.tool} · {e.status.value} · {ms_text(e.duration_ms)}"
    return "result", title, (lambda: visible_json(e.result)) if e.result else "(no result)"


@_makes(GuardTripped)
def _guard_tripped(e: GuardTripped) -> Made:
    title = f"guard · {e.call_id} · {e.tool} repeated from the same state · not executed"
    return "guard", title, f"fingerprint {e.fingerprint}"


@_makes(ReviewVerdict)
def _review_verdict(e: ReviewVerdict) -> Made:
    reasons = "\n".join(f"· {reason}" for reason in e.reasons)
    return "review", f"review · round {e.round} · {e.verdict.upper()}", reasons


@_makes(ModelRetry)
def _model_retry(e: ModelRetry) -> Made:
    if e.delay_s == 0:  # no retry of loopdeck's: the gateway's agent retries what it retries
        return "note", f"model call failed · {e.attempt} in a row", e.error
    return "note", f"model retry {e.attempt} in {e.delay_s:g} s", e.error


@_makes(ContextCompacted)
def _context_compacted(e: ContextCompacted) -> Made:
    title = f"context compacted · {e.tokens_before:,} → {e.tokens_after:,} tokens"
    done = f"{e.results_shortened:,} results shortened, {e.turns_dropped:,} turns dropped"
    return "note", title, f"{e.reason}: {done}"


@_makes(OperatorCommand)
def _operator_command(e: OperatorCommand) -> Made:
    return "note", f"operator · {e.command} · by {e.by}", ""


@_makes(OperatorMessage)
def _operator_message(e: OperatorMessage) -> Made:
    """The operator's words to the model, as it hears them (capped), shown escaped."""
    return "approval", f"the operator says · by {e.by} at {clock_text(e.at)}", e.text


@_makes(RunCorrected)
def _run_corrected(e: RunCorrected) -> Made:
    return "note", "record corrected", e.detail


@_makes(RecordingHeld)
def _recording_held(e: RecordingHeld) -> Made:
    title = f"held · {outage_text(e.cause, e.since, e.spill)}"
    return "note", title, f"{e.detail}; stops after {e.bound_s:g} s"


@_makes(RecordingResumed)
def _recording_resumed(e: RecordingResumed) -> Made:
    return "note", f"resumed · {outage_words(e.cause)} for {e.held_s:.1f} s", ""


_makes(UnrequestedChange)(unrequested_entry)  # what the run noticed: `operator/run_findings.py`
_makes(Finding)(finding_entry)


@_makes(RunStopped)
def _run_stopped(e: RunStopped) -> Made:
    unheard = "".join(f"\nnever heard by the model: {text}" for text in e.unheard)
    return "stop", f"stop · {e.stop_reason.value.upper()} · {e.state.value}", e.detail + unheard
