"""A fork's trace (`loopdeck fork`, exported with `loopdeck export RUN --otlp`): its run's span
says it is a fork (`loopdeck.fork.*`) and links to its source's run span (the source's trace
id and span id come from its run id, as every trace's do). The events it was rebuilt from
keep their source's times, which come before the fork's own start: its run's span starts at
its earliest event, so every span stays inside it, and the spans of those events say
`loopdeck.fork.from_source` (the source made them; the fork served them from its log, a model
reply at no cost)."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from opentelemetry.trace import Link, SpanContext, TraceFlags

from loopdeck.core.events import Event
from loopdeck.core.replay_events import RunForked
from loopdeck.operator.otel_attributes import Attributes

FROM_SOURCE = "loopdeck.fork.from_source"


def digest(text: str, size: int) -> int:
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:size], "big") or 1


def fork_attributes(e: RunForked) -> Attributes:
    return {
        "loopdeck.fork.source": e.source,
        "loopdeck.fork.at_call": e.at_call,
        "loopdeck.fork.through_seq": e.through_seq,
        "loopdeck.fork.state_restored": e.state_restored,
    }


def source_link(e: RunForked) -> Link:
    """A link to the source's run span, in the source's own trace."""
    context = SpanContext(
        trace_id=digest(e.source, 16),
        span_id=digest(f"{e.source}\0run", 8),
        is_remote=True,
        trace_flags=TraceFlags(TraceFlags.SAMPLED),
    )
    return Link(context, {"loopdeck.link": "forked_from"})


def fork_of(events: Sequence[Event]) -> RunForked | None:
    return next((e for e in events if isinstance(e, RunForked)), None)
