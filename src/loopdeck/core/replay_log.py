"""A run rebuilt from its log: the runtime runs again from its start, served what it was
served the first time (the model's replies, the tools' results, the operator's decisions and
answers, the env's state as it was seen), and every event it makes is checked against the
one the log holds at that place. When the log has no more, the run is where it was when its
worker was lost, with everything it had (its conversation, plan and round, budgets spent,
guard keys, grants and their uses, receipts, spent idempotency keys), and goes on live.

What the log has is served from `ReplayLog`; `core/recorded_inputs.py` puts it between the
runtime and its model, env, dispatcher, approver and answerer. An event class the log keeps
but a rebuilt run does not make again the same way (budgets and retries with their times, a
store's hold, a push, a move) is left out of the comparison (`NOISE`: every class without a
key). What came from outside the run's task (the operator's messages, pause and resume, a
revoke, a resolve) is done again where the log has it: right after the event before it, or,
when it arrived while the model was thinking (after the reply's `asked_after`), while the
rebuilt model call is served. A write the log shows approved but never finished was in
flight when the worker was lost: it is `outcome_unknown`, never run again unasked.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import islice
from typing import Any

from loopdeck.core.approvals import Answer, ApprovalDecision, ApprovalRequest
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
    GrantGiven,
    GrantRevoked,
    GuardTripped,
    ModelCalled,
    ModelReplied,
    ModelRetry,
    OperatorCommand,
    OperatorMessage,
    OutcomeResolved,
    PlanWritten,
    PolicyDecided,
    PolicyInForce,
    QuestionAnswered,
    QuestionAsked,
    ReviewVerdict,
    RunStarted,
    RunStopped,
    StateChanged,
    StateSeen,
    ToolFinished,
)
from loopdeck.core.grant_rules import GrantRule
from loopdeck.core.model import ModelReply, ProviderError
from loopdeck.core.tools import ErrorCode, Provenance, ToolFailure, ToolResult, ToolSpec

# What of each event must be the same when the run is rebuilt; a class without a key is noise.
KEYS: dict[type[Any], Callable[[Any], tuple[Any, ...]]] = {
    RunStarted: lambda e: (),
    StateChanged: lambda e: (e.source, e.target),
    PlanWritten: lambda e: (e.round, e.steps),
    ModelReplied: lambda e: (e.role, e.round, e.messages, e.tail_sha256),
    ModelCalled: lambda e: (e.role, e.round),
    ModelRetry: lambda e: (e.attempt,),
    DecisionMade: lambda e: (e.round, e.decision),
    DecisionInvalid: lambda e: (e.round,),
    CallProposed: lambda e: (e.call_id, e.tool, e.args, e.state_hash),
    ApprovalRequested: lambda e: (e.call_id, e.args_sha256, e.grant_id),
    ApprovalDecided: lambda e: (e.call_id, e.approved),
    ApprovalInvalidated: lambda e: (e.call_id,),
    ApprovalWithdrawn: lambda e: (e.call_id,),
    GrantGiven: lambda e: (e.grant_id, e.call_id),
    GrantRevoked: lambda e: (e.grant_id,),
    OutcomeResolved: lambda e: (e.call_id, e.applied),
    PolicyInForce: lambda e: (e.sha256,),
    PolicyDecided: lambda e: (e.call_id,),
    QuestionAsked: lambda e: (e.question_id,),
    QuestionAnswered: lambda e: (e.question_id,),
    ToolFinished: lambda e: (e.call_id, e.status),
    GuardTripped: lambda e: (e.call_id,),
    ReviewVerdict: lambda e: (e.round, e.verdict, e.before_hash, e.after_hash),
    ContextCompacted: lambda e: (e.round,),
    OperatorCommand: lambda e: (e.command,),
    OperatorMessage: lambda e: (e.text,),
    StateSeen: lambda e: (e.fingerprint,),
    RunStopped: lambda e: (),
}
# What came from outside the run's task: done again where the log has it.
FROM_OUTSIDE = (OperatorMessage, OperatorCommand, GrantRevoked, OutcomeResolved)
# What ends an asking in a log: its decision, its expiry unanswered (or its approval found no
# longer holding), its withdrawal.
ASKING_ENDS = (ApprovalDecided, ApprovalInvalidated, ApprovalWithdrawn)
OVERFLOW = "context overflow"  # in a compaction's reason: the provider said the prompt overflowed


def key(event: Any) -> tuple[Any, ...] | None:
    """What must match of `event` (its class first); None: noise, not compared."""
    make = KEYS.get(type(event))
    return None if make is None else (type(event).__name__, *make(event))


class ReplayDiverged(Exception):
    """The rebuilt run did something else than its log says it did: it cannot go on."""


class ReplayLog:
    """The events a run is rebuilt from, and where the rebuilt run is in them."""

    def __init__(self, events: list[Event]) -> None:
        self.events = events
        # A fork's source: what it spent is the source's (its replies served cost the fork
        # nothing; the fork's clock starts as it goes live).
        self.free = False
        self.sig: list[Event] = [e for e in events if key(e) is not None]
        self.at = 0  # the next of `sig` the rebuilt run must make
        self.last_seq = events[-1].seq if events else 0
        self.live = not self.sig
        self.diverged: str | None = None
        self.seen: tuple[dict[str, Any], str] | None = None  # the last snapshot seen
        self.seen_fingerprint: str | None = None  # an env's own fingerprint, last seen
        self.during_call = _during_calls(events)
        self.in_flight = _in_flight(events)
        self.asked = {e.call_id for e in events if isinstance(e, ApprovalRequested)}
        self.questions = {e.question_id for e in events if isinstance(e, QuestionAsked)}
        self._injecting = False
        # Who does again what came from outside (`core/recorded_inputs.py`: the runtime).
        self.outside: Callable[[Event], None] = lambda event: None
        # Told once, when the log has no more: the run goes on live from there.
        self.on_live: list[Callable[[], None]] = []

    def next(self) -> Event | None:
        return self.sig[self.at] if self.at < len(self.sig) else None

    # -- the rebuilt run's events, checked against the log ------------------------------
    def matched(self, event: Any) -> None:
        """`event`, made by the rebuilt run, is the log's next; else `ReplayDiverged`."""
        made = key(event)
        if made is None or self.live:
            return
        expected = self.next()
        if expected is None or key(expected) != made:
            self.diverge(event, expected)
        assert expected is not None
        if isinstance(expected, StateSeen):
            if expected.snapshot is not None:
                self.seen = (expected.snapshot, expected.fingerprint)
            else:
                self.seen_fingerprint = expected.fingerprint
        self.at += 1
        if not self._injecting:
            self._from_outside(during_call=False)
        if not self.live and self.at == len(self.sig):
            self.go_live()

    def diverge(self, made: Any, expected: Event | None) -> None:
        said = "its end" if expected is None else f"event {expected.seq} ({_kind(expected)})"
        self.diverged = (
            f"the run could not be rebuilt from its log: at {said} the rebuilt run made"
            f" {_kind(made)} instead"
        )
        raise ReplayDiverged(self.diverged)

    def go_live(self) -> None:
        self.live = True
        for then in self.on_live:
            then()

    def _from_outside(self, *, during_call: bool) -> None:
        """What came from outside the run's task next in the log, done again now: those that
        came right after the last event (or, `during_call`, while the model thought)."""
        self._injecting = True
        try:
            while (came := self.next()) is not None and isinstance(came, FROM_OUTSIDE):
                if not during_call and came.seq in self.during_call:
                    return
                at = self.at
                self.outside(came)
                if self.at == at:  # nothing was made: the run does not take it as it did
                    self.diverge(came, came)
        finally:
            self._injecting = False
        if not self.live and self.at == len(self.sig):
            self.go_live()

    # -- what the rebuilt run is served ------------------------------------------------
    def model_reply(self) -> ModelReply:
        """The model call's recorded reply, or its recorded failure raised."""
        self._from_outside(during_call=True)
        came = self.next()
        if isinstance(came, ModelReplied):
            reply = ModelReply.model_validate(came.reply)
            if self.free:  # served, not called: no tokens, no cost (recorded so in the fork)
                free = {"prompt_tokens": 0, "completion_tokens": 0, "cost_usd": 0.0}
                reply = reply.model_copy(update=free)
            return reply
        if isinstance(came, ModelRetry):
            raise ProviderError(came.error, retryable=True)
        if isinstance(came, ContextCompacted) and OVERFLOW in came.reason:
            raise ProviderError(came.reason, retryable=True, context_overflow=True)
        self.diverge("a model call", came)
        raise AssertionError  # diverge raises

    def tool_result(self, spec: ToolSpec, call_id: str) -> ToolResult | None:
        """The call's recorded result; a write in flight when the log ends, its unknown
        outcome; None: the call runs (live)."""
        if self.live:
            if spec.risk == "write" and call_id in self.in_flight:
                self.in_flight.discard(call_id)
                return ToolResult.failure(
                    spec.name, call_id, ErrorCode.OUTCOME_UNKNOWN,
                    f"{spec.name} was approved and may have run when the worker running it"
                    " was lost; it is not run again. Check the state before acting on it.",
                )  # fmt: skip
            return None
        came = self.next()
        if not isinstance(came, ToolFinished) or came.call_id != call_id:
            self.diverge(f"a call of {spec.name} ({call_id})", came)
            raise AssertionError
        got = came.result
        error = got.get("error")
        return ToolResult(
            ok=bool(got.get("ok")),
            data=got.get("data"),
            error=None if not error else ToolFailure.model_validate(error),
            truncated=bool(got.get("truncated", False)),
            provenance=Provenance(
                tool=spec.name, call_id=call_id, started_at=came.at, duration_ms=came.duration_ms
            ),
        )

    def decision(self, request: ApprovalRequest) -> ApprovalDecision:
        """The operator's recorded decision on the ask; a request nobody decided before it
        expired raises TimeoutError, as the wait for it did."""
        came = self.next()
        if isinstance(came, ApprovalDecided) and came.call_id == request.call_id:
            grant = next(
                (e for e in self.sig[self.at :] if isinstance(e, GrantGiven)
                 and e.call_id == request.call_id),
                None,
            )  # fmt: skip
            return ApprovalDecision(
                call_id=came.call_id, approved=came.approved, reason=came.reason, by=came.by,
                args=came.args, grant=None if grant is None else _rule(grant),
                on_earlier_ask=came.on_earlier_ask,
            )  # fmt: skip
        if isinstance(came, ApprovalInvalidated) and came.call_id == request.call_id:
            raise TimeoutError(came.problem)
        self.diverge(f"an ask for {request.call_id}", came)
        raise AssertionError

    def asked_as(self, request: ApprovalRequest) -> ApprovalRequest:
        """The asking the rebuilt run is about to make, with the times the log has for it when
        the log has its end (decided, expired unanswered, withdrawn): a decision the store took
        on it names it by them, and binds it (`core/asked_on.py`) as the run bound it. One the
        log ends waiting on keeps its new times: it is asked again (`operator/resume.py`)."""
        logged: ApprovalRequested | None = None
        for event in islice(self.sig, len(self.sig) if self.live else self.at, None):
            if logged is None and isinstance(event, ApprovalRequested):
                if (event.call_id, event.args_sha256) != (request.call_id, request.args_sha256):
                    return request  # another: the rebuilt run diverges there (`matched`)
                logged = event
            elif isinstance(event, ASKING_ENDS) and logged and event.call_id == logged.call_id:
                times = {"requested_at": logged.requested_at, "expires_at": logged.expires_at}
                return request.model_copy(update=times)
        return request

    def standing(self, request: ApprovalRequest) -> ApprovalDecision | None:
        """The decision the log has next if the run took it as a standing one, made on an
        earlier asking (over what a rule says of this one), else None."""
        came = self.next()
        if isinstance(came, ApprovalDecided) and came.call_id == request.call_id:
            return self.decision(request) if came.on_earlier_ask else None
        return None

    def answer(self, question_id: str) -> Answer:
        """The recorded answer; one that came by the question's own timeout raises it."""
        came = self.next()
        if not isinstance(came, QuestionAnswered) or came.question_id != question_id:
            self.diverge(f"question {question_id}", came)
            raise AssertionError
        if came.by == "timeout":
            raise TimeoutError(question_id)
        return Answer(text=came.answer, by=came.by)

    def read(self) -> tuple[dict[str, Any], str] | None:
        """A look at the env's state: the snapshot the log has next if it has one here, else
        the last one seen; None when nothing was seen yet (the env is read)."""
        came = self.next()
        if isinstance(came, StateSeen) and came.snapshot is not None:
            return came.snapshot, came.fingerprint
        return self.seen

    def fingerprint(self) -> str | None:
        """An env's own fingerprint, as `read` serves a snapshot."""
        came = self.next()
        if isinstance(came, StateSeen) and came.snapshot is None:
            return came.fingerprint
        return self.seen_fingerprint

    def last_of(self, cls: type[Any]) -> Any | None:
        return next((e for e in reversed(self.events) if isinstance(e, cls)), None)


def _kind(event: Any) -> str:
    if isinstance(event, str):
        return event
    return str(getattr(event, "kind", type(event).__name__))


def _rule(grant: GrantGiven) -> GrantRule:
    for_s = None
    if grant.expires_at is not None:
        for_s = max((grant.expires_at - grant.at).total_seconds(), 0.001)
    scope: Any = grant.scope
    return GrantRule(scope=scope, fields=dict(grant.fields), uses=grant.uses, for_s=for_s)


def _during_calls(events: list[Event]) -> set[int]:
    """The numbers of the events from outside that arrived while a model call was in flight
    (after its reply's `asked_after`, before the reply)."""
    during: set[int] = set()
    outside = [e.seq for e in events if isinstance(e, FROM_OUTSIDE)]
    for reply in (e for e in events if isinstance(e, ModelReplied)):
        during.update(seq for seq in outside if reply.asked_after < seq < reply.seq)
    return during


def _in_flight(events: list[Event]) -> set[str]:
    """Writes the log shows approved (their approval the last word on them) that never
    finished: they may have run."""
    approved: set[str] = set()
    for event in events:
        if isinstance(event, ApprovalDecided) and event.approved:
            approved.add(event.call_id)
        elif isinstance(event, ApprovalInvalidated | ToolFinished):
            approved.discard(event.call_id)
    return approved
