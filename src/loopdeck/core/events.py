"""Typed events for everything the runtime does, and the bus that carries them."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Annotated, Any, Literal, ParamSpec, Protocol, TypeVar, cast

from pydantic import Field, TypeAdapter, model_validator

from loopdeck.core.budgets import Cap, CapUsage, cap_usages
from loopdeck.core.decision_events import (
    ApprovalDecided,
    ApprovalInvalidated,
    ApprovalRequested,
    ApprovalWithdrawn,
    GrantGiven,
    GrantRevoked,
    OutcomeResolved,
    PolicyDecided,
    PolicyInForce,
    QuestionAnswered,
    QuestionAsked,
)
from loopdeck.core.event_base import CallStatus, EventBase
from loopdeck.core.finding_events import Finding, UnrequestedChange
from loopdeck.core.progress_events import ToolProgress
from loopdeck.core.push_events import DecisionsPushed, PushFailed
from loopdeck.core.replay_events import ModelReplied, RunForked, RunMoved, StateSeen
from loopdeck.core.states import RunState, StopReason

__all__ = [
    "ApprovalDecided",
    "ApprovalInvalidated",
    "ApprovalRequested",
    "ApprovalWithdrawn",
    "CallStatus",
    "DecisionsPushed",
    "EventBase",
    "Finding",
    "GrantGiven",
    "GrantRevoked",
    "ModelReplied",
    "OutcomeResolved",
    "PolicyDecided",
    "PolicyInForce",
    "PushFailed",
    "QuestionAnswered",
    "QuestionAsked",
    "RunForked",
    "RunMoved",
    "StateSeen",
    "ToolProgress",
    "UnrequestedChange",
]


class RunStarted(EventBase):
    kind: Literal["run_started"] = "run_started"
    env: str
    script: str | None
    model: str
    mode: str
    goal: str
    budget: dict[str, float]
    # The model's input window in tokens; None: unknown, so the conversation is not compacted.
    context_window: int | None = None


class StateChanged(EventBase):
    kind: Literal["state_changed"] = "state_changed"
    source: RunState
    target: RunState


class PlanWritten(EventBase):
    kind: Literal["plan_written"] = "plan_written"
    round: int
    steps: list[str]


class ModelCalled(EventBase):
    kind: Literal["model_called"] = "model_called"
    role: str
    round: int
    model: str
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float | None
    latency_ms: float
    # What the model said in this turn, capped like everything that reaches the model.
    content: str = ""
    # The turn's tokens were never reported (an agent's turn cut short, or silent): unknown.
    tokens_unknown: bool = False


class ModelRetry(EventBase):
    kind: Literal["model_retry"] = "model_retry"
    attempt: int
    error: str
    delay_s: float


class DecisionMade(EventBase):
    kind: Literal["decision_made"] = "decision_made"
    round: int
    decision: str
    reason_code: str
    message: str
    via: str
    plan_step: int | None = None


class DecisionInvalid(EventBase):
    kind: Literal["decision_invalid"] = "decision_invalid"
    round: int
    error: str
    corrections_used: int


class CallProposed(EventBase):
    kind: Literal["call_proposed"] = "call_proposed"
    call_id: str
    round: int
    tool: str
    args: dict[str, Any]
    risk: str
    fingerprint: str
    state_hash: str
    risk_source: str = ""  # "server says read-only", "scenario override"; "" for Python tools


class ToolRetry(EventBase):
    kind: Literal["tool_retry"] = "tool_retry"
    call_id: str
    tool: str
    attempt: int
    error: str
    delay_s: float


class ToolFinished(EventBase):
    kind: Literal["tool_finished"] = "tool_finished"
    call_id: str
    tool: str
    status: CallStatus
    result: dict[str, Any]
    duration_ms: float


class GuardTripped(EventBase):
    kind: Literal["guard_tripped"] = "guard_tripped"
    call_id: str
    tool: str
    fingerprint: str


class BudgetUpdated(EventBase):
    """The ledger as it stands. Read it typed with `caps()`: each cap's `CapUsage`, its use
    None where some went unreported (unknown, never 0)."""

    kind: Literal["budget_updated"] = "budget_updated"
    # Each cap's (reported use, limit), by the cap's name (`Cap`).
    usage: dict[str, tuple[float, float]]
    # Calls that never said what they spent of a cap, by the cap's name (a reply with no
    # usage, an unpriced model): that cap's use is unknown, its pair above a lower bound.
    unreported: dict[str, int] = Field(default_factory=dict)
    # Time spent waiting on the operator (paused, or a write awaiting approval): not the
    # agent's, so not charged to the deadline. `held` names the wait going on now.
    operator_s: float = 0.0
    held: str | None = None
    # An agent's context window (tokens in it, its size), as it last said: not spent tokens.
    window_used: int | None = None
    window_size: int | None = None

    # The earlier form (before `unreported`), read into it by `_earlier_form`, never written:
    # fields, as a validator before the model's would make each budget event's JSON a dict.
    earlier_cost_unknown: int = Field(0, validation_alias="cost_unknown_calls", exclude=True)
    earlier_tokens_unknown: bool = Field(False, validation_alias="tokens_unknown", exclude=True)

    @model_validator(mode="after")
    def _earlier_form(self) -> BudgetUpdated:
        """An event in the earlier form reads as its `unreported`, shown the same."""
        if not (self.earlier_cost_unknown or self.earlier_tokens_unknown):
            return self
        unreported = dict(self.unreported)
        if self.earlier_cost_unknown:
            unreported.setdefault(Cap.COST.value, self.earlier_cost_unknown)
        if self.earlier_tokens_unknown:
            unreported.setdefault(Cap.TOKENS.value, 1)  # how many calls: never said
        fields = self.__dict__  # frozen: set once, here, as the model is made
        fields.update(unreported=unreported, earlier_cost_unknown=0, earlier_tokens_unknown=False)
        return self

    def caps(self) -> dict[Cap, CapUsage]:
        """Each cap's use and limit, None where some of the use went unreported."""
        return cap_usages(self.usage, self.unreported)

    @property
    def cost_unknown_calls(self) -> int:
        """Model calls of unknown price (the stores' `cost_unknown_calls` column)."""
        return self.unreported.get(Cap.COST.value, 0)

    @property
    def tokens_unknown(self) -> bool:
        """Read `caps()[Cap.TOKENS].used is None` instead; kept for the earlier readers."""
        return bool(self.unreported.get(Cap.TOKENS.value, 0))


class ReviewVerdict(EventBase):
    kind: Literal["review_verdict"] = "review_verdict"
    round: int
    verdict: Literal["pass", "fail", "stalled"]
    reasons: list[str]
    before_hash: str
    after_hash: str


class ContextCompacted(EventBase):
    kind: Literal["context_compacted"] = "context_compacted"
    round: int
    tokens_before: int
    tokens_after: int
    reason: str
    results_shortened: int = 0
    turns_dropped: int = 0


class OperatorCommand(EventBase):
    kind: Literal["operator_command"] = "operator_command"
    command: Literal["cancel", "kill", "pause", "resume"]
    by: str


class OperatorMessage(EventBase):
    """The operator spoke to the agent (`loopdeck message`, `m` in the console): the text,
    capped as the model hears it before its next turn."""

    kind: Literal["operator_message"] = "operator_message"
    text: str
    by: str


class RunCorrected(EventBase):
    """The record of this run was put right: a reader had marked the live run crashed."""

    kind: Literal["run_corrected"] = "run_corrected"
    detail: str


class RecordingHeld(EventBase):
    """The run holds: its store cannot take writes (`cause`: unreachable, locked, disk full),
    so it neither calls the model nor dispatches a write until the store is back, for at most
    `bound_s`. What it emits meanwhile is kept in memory and spilled to `spill`."""

    kind: Literal["recording_held"] = "recording_held"
    cause: str
    since: datetime
    detail: str
    spill: str | None = None
    bound_s: float


class RecordingResumed(EventBase):
    """The store took writes again after `held_s` seconds of holding."""

    kind: Literal["recording_resumed"] = "recording_resumed"
    cause: str
    held_s: float


class RunStopped(EventBase):
    kind: Literal["run_stopped"] = "run_stopped"
    state: RunState
    stop_reason: StopReason
    detail: str
    # The operator's messages still waiting for the model's next turn, which never came.
    unheard: list[str] = []


Event = Annotated[
    RunStarted
    | StateChanged
    | PlanWritten
    | ModelCalled
    | ModelRetry
    | DecisionMade
    | DecisionInvalid
    | CallProposed
    | ApprovalRequested
    | ApprovalDecided
    | ApprovalInvalidated
    | ApprovalWithdrawn
    | GrantGiven
    | GrantRevoked
    | OutcomeResolved
    | PolicyInForce
    | PolicyDecided
    | QuestionAsked
    | QuestionAnswered
    | DecisionsPushed
    | PushFailed
    | ToolRetry
    | ToolProgress
    | ToolFinished
    | GuardTripped
    | BudgetUpdated
    | ReviewVerdict
    | ContextCompacted
    | OperatorCommand
    | OperatorMessage
    | RunCorrected
    | RecordingHeld
    | RecordingResumed
    | UnrequestedChange
    | Finding
    | ModelReplied
    | StateSeen
    | RunMoved
    | RunForked
    | RunStopped,
    Field(discriminator="kind"),
]


def kind_of(cls: type[EventBase]) -> str:
    """The `kind` a class's events are stored under (the events table's `kind` column)."""
    return str(cls.model_fields["kind"].default)


# A stored row's body read back: its `kind` picks the class. The list adapter reads a batch
# of rows in one validation.
EVENT_ADAPTER: TypeAdapter[Event] = TypeAdapter(Event)
EVENTS_ADAPTER: TypeAdapter[list[Event]] = TypeAdapter(list[Event])

Subscriber = Callable[[Event], None]
P = ParamSpec("P")
E = TypeVar("E", bound=EventBase)


class Emit(Protocol):
    """How the runtime emits an event: its class and its fields (`emit(StateChanged,
    run_id=…, source=…, target=…)`); the bus makes it with its number."""

    def __call__(self, make: Callable[P, E], /, *args: P.args, **kwargs: P.kwargs) -> None: ...


class EventBus:
    """Numbers events in order and hands each to every subscriber, synchronously."""

    def __init__(self) -> None:
        # A tuple, replaced on (un)subscribe: publishing iterates it without a copy per event,
        # and a subscriber added or removed while an event is handed out does not disturb it.
        self._subscribers: tuple[Subscriber, ...] = ()
        self._seq = 0

    @property
    def last_seq(self) -> int:
        """The number of the last event handed out (0: none yet)."""
        return self._seq

    def subscribe(self, subscriber: Subscriber) -> Callable[[], None]:
        self._subscribers += (subscriber,)

        def unsubscribe() -> None:
            if subscriber in self._subscribers:
                kept = list(self._subscribers)
                kept.remove(subscriber)
                self._subscribers = tuple(kept)

        return unsubscribe

    def emit(self, make: Callable[P, E], /, *args: P.args, **kwargs: P.kwargs) -> E:
        """The event made with the next number (frozen, never copied: a copy per event cost
        a runaway's recording a quarter of its speed), handed to every subscriber."""
        seq = self._seq + 1
        made: Any = cast(Any, make)(*args, **kwargs, seq=seq)  # `seq`: a field of every event
        self._seq = seq  # an event that fails to be made takes no number
        for subscriber in self._subscribers:
            subscriber(made)
        event: E = made
        return event

    def publish(self, event: Event) -> Event:
        """An event made elsewhere, handed to every subscriber with the next number: as it is
        when it already carries that number, else as a numbered copy (the event passed in is
        left as it was; published twice, it goes out twice with two numbers)."""
        self._seq += 1
        numbered = event if event.seq == self._seq else event.numbered(self._seq)
        for subscriber in self._subscribers:
            subscriber(numbered)
        return numbered
