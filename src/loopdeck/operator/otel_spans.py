"""A run's events as OpenTelemetry spans, in the GenAI semantic conventions' shape:
`invoke_agent {env}` from the start to the stop; in rounds mode a `plan {env}` span a round,
from its start to the next round's or the stop, holding the round's `chat {model}` calls (the
planner's first) and `execute_tool {tool}` calls (from the proposal to the result, its
approval inside); in ReAct mode those hang under the run's span. What each event says on them
is `operator/otel_attributes.py`'s; sending them is `operator/otel_export.py`'s.

Fed one event at a time, so a live run and a stored one make the same spans. A live run's
spans are ended as soon as nothing more can land on them (`settled`), so they can be sent
while it runs: a round's when the next one starts, a model call's and a finished tool call's
at the next model call (an operator's decision on a call always comes before its result),
except a write whose outcome is unknown, which waits for the operator's word. Every time comes
from the events (`at`), never from now; the ids come from the run id, so a run sent twice
(live, then again) is one trace. A run that stopped without recording its stop (a crash) ends
at its last event; a call without its result ends there too.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanLimits, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.id_generator import IdGenerator
from opentelemetry.sdk.trace.sampling import ALWAYS_ON
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from loopdeck import __version__
from loopdeck.core.event_base import CallStatus
from loopdeck.core.events import (
    BudgetUpdated,
    CallProposed,
    DecisionMade,
    Event,
    ModelCalled,
    OutcomeResolved,
    PlanWritten,
    RunStarted,
    RunStopped,
    StateChanged,
    ToolFinished,
)
from loopdeck.core.replay_events import ModelReplied, RunForked
from loopdeck.core.states import RunState, StopReason
from loopdeck.operator.otel_attributes import (
    FAILED_CALLS,
    FAILED_STOPS,
    Attributes,
    chat_attributes,
    decision_attributes,
    failure,
    finished_attributes,
    mark,
    plan_attributes,
    run_attributes,
    stop_attributes,
    tool_attributes,
)
from loopdeck.operator.otel_fork import FROM_SOURCE, digest, fork_attributes, fork_of, source_link

MAX_EVENTS = 10_000  # span events a span keeps (the SDK's default, 128, drops a long run's)
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def ns(at: datetime) -> int:
    """An event's time in nanoseconds since the epoch, exact to its microsecond."""
    aware = at if at.tzinfo is not None else at.replace(tzinfo=UTC)
    return (aware - EPOCH) // timedelta(microseconds=1) * 1000


class RunIds(IdGenerator):
    """The trace id from the run id, a span's id from its place in the run (`key`, set just
    before the span is started)."""

    def __init__(self) -> None:
        self.run_id = ""
        self.key = "run"

    def generate_trace_id(self) -> int:
        return digest(self.run_id, 16)

    def generate_span_id(self) -> int:
        return digest(f"{self.run_id}\0{self.key}", 8)


class _Ended(SpanProcessor):
    def __init__(self) -> None:
        self.spans: list[ReadableSpan] = []

    def on_end(self, span: ReadableSpan) -> None:
        self.spans.append(span)


@dataclass
class _Open:
    span: Span
    start: int
    end: int | None = None  # None: the run's end
    children: list[_Open] | None = None  # a round's chat and tool spans
    held: bool = False  # a write whose outcome is unknown: the operator's word may come
    ended: bool = False


def _resource() -> Resource:
    """Who sends: loopdeck (or `OTEL_SERVICE_NAME`), with `OTEL_RESOURCE_ATTRIBUTES`."""
    name = os.environ.get("OTEL_SERVICE_NAME") or "loopdeck"
    return Resource.create({"service.name": name, "service.version": __version__})


class TraceBuilder:
    """One run's spans, built as its events come (`take`), ended by `finish`. Spans stay open
    until then, so a decision that comes after a call's result still lands on its span."""

    def __init__(self, *, content: bool = False, events: Sequence[Event] = ()) -> None:
        """`events`: the whole run, when known before (an export): a fork's run span starts
        at its earliest event (`operator/otel_fork.py`)."""
        self.content = content
        forked = fork_of(events)
        self._forked_at = forked.seq if forked is not None else 0
        self._earliest = min((ns(e.at) for e in events), default=None)
        self._seq = 0
        self._ids = RunIds()
        self._ended = _Ended()
        provider = TracerProvider(
            sampler=ALWAYS_ON,
            resource=_resource(),
            id_generator=self._ids,
            span_limits=SpanLimits(max_events=MAX_EVENTS),
            shutdown_on_exit=False,
        )
        provider.add_span_processor(self._ended)
        self._tracer = provider.get_tracer("loopdeck", __version__)
        self._open: list[_Open] = []
        self._unsettled: list[_Open] = []  # model and tool calls not ended yet
        self._root: _Open | None = None
        self._round: _Open | None = None
        self._rounds = 0
        self._tools: dict[str, _Open] = {}
        self._chat: Span | None = None
        self._reply: ModelReplied | None = None  # the reply the next ModelCalled is of
        self._env, self._model, self._mode = "", "", "rounds"
        self._last = 0
        self._stop: RunStopped | None = None
        self._budget: BudgetUpdated | None = None
        # The run's totals; None once a call did not say them (unknown, left out, never 0).
        self._tokens: list[int] | None = [0, 0]
        self._cost: float | None = 0.0
        self.finished = False

    @property
    def trace_id(self) -> str:
        """32 hex digits, as backends show it ("" before the first event)."""
        if self._root is None:
            return ""
        return trace.format_trace_id(self._root.span.get_span_context().trace_id)

    def take(self, event: Event) -> None:
        if self.finished:
            return
        at, self._seq = ns(event.at), event.seq
        if self._root is None:
            self._start_run(event, at if self._earliest is None else min(at, self._earliest))
        if not (isinstance(event, RunStopped) and event.stop_reason is StopReason.CRASHED):
            self._last = max(self._last, at)  # a crash's mark is not the runner's last word
        match event:
            case StateChanged(target=RunState.PLANNING) if self._mode == "rounds":
                self._next_round(at, self._rounds + 1)
            case PlanWritten():
                self._in_round(event.round, at)
                self._scope().span.set_attributes(plan_attributes(event, self.content))
            case ModelReplied():  # recorded just before its ModelCalled: the whole reply
                self._reply = event
            case ModelCalled():
                self._model_called(event, at)
            case DecisionMade() if self._chat is not None:
                self._chat.set_attributes(decision_attributes(event, self.content))
            case CallProposed():
                self._proposed(event, at)
            case ToolFinished():
                self._tool_finished(event, at)
            case BudgetUpdated():
                self._budget = event
            case RunStopped():
                self._stop = event
            case RunForked():  # the run's span says so, linked to its source's
                assert self._root is not None
                link = source_link(event)
                self._root.span.set_attributes(fork_attributes(event))
                self._root.span.add_link(link.context, link.attributes)
            case _:
                self._mark(event, at)

    def _start(
        self,
        name: str,
        key: str,
        parent: _Open | None,
        at: int,
        attributes: Attributes,
        kind: SpanKind = SpanKind.INTERNAL,
    ) -> _Open:
        self._ids.key = key
        if parent is not None and self._seq < self._forked_at:
            attributes = {**(attributes or {}), FROM_SOURCE: True}
        # The root has no parent, whatever span this process has current.
        context = Context() if parent is None else trace.set_span_in_context(parent.span)
        span = self._tracer.start_span(
            name, context=context, kind=kind, attributes=attributes, start_time=at
        )
        opened = _Open(span, at)
        self._open.append(opened)
        if parent is not None:
            self._unsettled.append(opened)
            if parent.children is not None:
                parent.children.append(opened)
        return opened

    def _start_run(self, event: Event, at: int) -> None:
        self._ids.run_id = event.run_id
        attributes: Attributes = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.conversation.id": event.run_id,
        }
        if isinstance(event, RunStarted):
            self._env, self._model, self._mode = event.env, event.model, event.mode
            attributes = run_attributes(event, self.content)
        self._root = self._start(f"invoke_agent {self._env}".strip(), "run", None, at, attributes)

    def _scope(self) -> _Open:
        """The span an event that names no call goes on: the round's, else the run's."""
        scope = self._round or self._root
        assert scope is not None  # the run's span is made by the first event
        return scope

    def _next_round(self, at: int, number: int) -> None:
        if self._round is not None and self._round.end is None:
            self._round.end = at
            self._settle(self._round.children or [])
            if not any(child.held for child in self._round.children or []):
                self._end(self._round)
        self._rounds = number
        attributes: Attributes = {
            "gen_ai.operation.name": "plan",
            "gen_ai.agent.name": self._env,
            "loopdeck.round": number,
        }
        name = f"plan {self._env}".strip()
        self._round = self._start(name, f"round:{number}", self._root, at, attributes)
        self._round.children = []

    def _in_round(self, number: int, at: int) -> None:
        """A round the record never said starting (no state change) starts at its first event."""
        if self._mode == "rounds" and number > self._rounds:
            self._next_round(at, number)

    def _model_called(self, e: ModelCalled, at: int) -> None:
        start = at - round(e.latency_ms * 1_000_000)
        self._in_round(e.round, start)
        reply, self._reply = self._reply, None
        calls = reply.reply.get("tool_calls") if reply is not None else None
        attributes = chat_attributes(e, self._model, self.content, calls)
        name = f"chat {self._model or e.model}"
        scope = self._scope()
        self._settle(self._unsettled)
        self._unsettled = [opened for opened in self._unsettled if not opened.ended]
        opened = self._start(name, f"chat:{e.seq}", scope, max(start, scope.start), attributes,
                             SpanKind.CLIENT)  # fmt: skip
        opened.end = at
        self._chat = opened.span
        if e.tokens_unknown:
            self._tokens = None
        elif self._tokens is not None:
            self._tokens[0] += e.prompt_tokens
            self._tokens[1] += e.completion_tokens
        if e.cost_usd is None:
            self._cost = None
        elif self._cost is not None:
            self._cost += e.cost_usd

    def _proposed(self, e: CallProposed, at: int) -> None:
        self._in_round(e.round, at)
        attributes = tool_attributes(e, self.content)
        key = f"tool:{e.call_id}"
        self._tools[e.call_id] = self._start(
            f"execute_tool {e.tool}", key, self._scope(), at, attributes
        )

    def _tool_finished(self, e: ToolFinished, at: int) -> None:
        opened = self._tools.get(e.call_id)
        if opened is None:  # its proposal is not in the record: the result alone
            said: Attributes = {"gen_ai.tool.name": e.tool, "gen_ai.tool.call.id": e.call_id}
            opened = self._start(f"execute_tool {e.tool}", f"tool:{e.call_id}", self._scope(),
                                 at, {"gen_ai.operation.name": "execute_tool", **said})  # fmt: skip
            self._tools[e.call_id] = opened
        opened.end = at
        opened.held = e.status is CallStatus.OUTCOME_UNKNOWN
        opened.span.set_attributes(finished_attributes(e, self.content))
        if e.status in FAILED_CALLS:
            opened.span.set_status(Status(StatusCode.ERROR, failure(e)))

    def _mark(self, event: Event, at: int) -> None:
        said = mark(event, self.content)
        if said is None:
            return
        call = self._tools.get(said.call_id) if said.call_id else None
        if call is not None and call.ended:  # sent already: the word goes on the run's span
            call = None
        attributes = said.attributes
        if call is None and said.call_id:
            attributes = {**attributes, "gen_ai.tool.call.id": said.call_id}
        (call or self._scope()).span.add_event(said.name, attributes, timestamp=at)
        if call is not None and isinstance(event, OutcomeResolved):
            call.held = False

    def finish(self) -> list[ReadableSpan]:
        """Every span ended at the time its events gave (an unfinished one at the run's
        end: its stop, or its last event when it has none or crashed); the ended spans."""
        if self.finished or self._root is None:
            return list(self._ended.spans)
        self.finished = True
        stop = self._stop
        end = self._last
        if stop is not None and stop.stop_reason is not StopReason.CRASHED:
            end = max(ns(stop.at), self._root.start)
        for call in self._tools.values():
            if call.end is None:
                call.span.set_attribute("loopdeck.unfinished", True)
                if stop is not None:  # the run is over: the call never will be
                    call.span.set_attribute("loopdeck.status", CallStatus.INTERRUPTED.value)
                    call.span.set_status(Status(StatusCode.ERROR, CallStatus.INTERRUPTED.value))
        self._end_run(stop)
        for opened in reversed(self._open):
            if not opened.ended:
                opened.span.end(end_time=max(opened.end or end, opened.start))
        return list(self._ended.spans)

    @property
    def ended(self) -> list[ReadableSpan]:
        """The spans ended so far, in the order they ended."""
        return self._ended.spans

    def _settle(self, spans: list[_Open]) -> None:
        """End the model and tool calls among `spans` that have their end and can take
        nothing more."""
        for opened in spans:
            if opened.end is not None and not opened.held and opened.children is None:
                self._end(opened)

    def _end(self, opened: _Open) -> None:
        if opened is self._root or opened.ended:
            return
        opened.ended = True
        opened.span.end(end_time=max(opened.end or opened.start, opened.start))

    def _end_run(self, stop: RunStopped | None) -> None:
        root = self._root
        assert root is not None
        root.span.set_attributes(stop_attributes(stop, self._budget, self.content))
        totals: dict[str, int | float] = {}
        if self._tokens is not None:
            totals["gen_ai.usage.input_tokens"] = self._tokens[0]
            totals["gen_ai.usage.output_tokens"] = self._tokens[1]
        if self._cost is not None:
            totals["loopdeck.cost_usd"] = self._cost
        root.span.set_attributes(totals)
        if stop is None:
            root.span.set_attribute("loopdeck.unfinished", True)
        elif stop.stop_reason in FAILED_STOPS:
            root.span.set_attribute("error.type", stop.stop_reason.value)
            root.span.set_status(Status(StatusCode.ERROR, stop.stop_reason.value))
