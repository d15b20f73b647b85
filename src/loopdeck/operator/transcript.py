"""The run's transcript: what the operator reads to judge it, folded from its events.

Every entry is whole: the goal, plans, each model turn's text, each call with its full
arguments and its normalized result (the runtime's truncation mark is the only cut),
approvals with who, when and why, guard trips, review verdicts and the stop's full detail.
No Textual: the console renders entries, tests read them.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from datetime import datetime
from typing import Any

from loopdeck.core.events import CallStatus, EventBase
from loopdeck.core.recording import outage_text, outage_words
from loopdeck.core.text import short_args, visible, visible_json

MAX_ENTRIES = 5000


def clock_text(at: datetime) -> str:
    """A moment as the operator's local time of day."""
    return at.astimezone().strftime("%H:%M:%S")


def ms_text(ms: float) -> str:
    return f"{ms:,.0f} ms"


Body = str | Callable[[], str]
Made = tuple[str, str, Body]


class Entry:
    """One thing the operator reads, made from its event the first time it is read: a
    runaway's entries that scroll out of the bounded transcript unread cost a reference."""

    __slots__ = ("_event", "_handler", "_made")

    def __init__(self, event: EventBase, handler: Callable[[Any], Made]) -> None:
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
        """goal, plan, model, decision, call, approval, result, guard, review, stop or note."""
        return self._words()[0]

    @property
    def title(self) -> str:
        return self._words()[1]

    @property
    def body(self) -> str:
        return self._words()[2]

    def __repr__(self) -> str:
        return f"Entry({self.seq}, {self.kind!r}, {self.title!r})"

    @property
    def text(self) -> str:
        return f"{self.title}\n{self.body}" if self.body else self.title


class Transcript:
    """A bounded fold of events into entries; `dropped` counts the oldest ones let go."""

    def __init__(self, max_entries: int = MAX_ENTRIES) -> None:
        self.entries: deque[Entry] = deque(maxlen=max_entries)
        self.dropped = 0

    def apply(self, event: EventBase) -> Entry | None:
        """The event's entry, if the operator reads this kind of event. Its words are made
        when first read: the makers read only the (frozen) event, so the words are the same."""
        handler = ENTRY_MAKERS.get(getattr(event, "kind", ""))
        if handler is None:
            return None
        entry = Entry(event, handler)
        if len(self.entries) == self.entries.maxlen:
            self.dropped += 1
        self.entries.append(entry)
        return entry

    # -- one entry maker per event kind that the operator reads ------------------------------
    @staticmethod
    def _on_run_started(e: Any) -> tuple[str, str, str]:
        script = f"/{e.script}" if e.script else ""
        return "goal", f"goal · run {e.run_id} · {e.env}{script} · {e.model} · {e.mode}", e.goal

    @staticmethod
    def _on_plan_written(e: Any) -> tuple[str, str, str]:
        steps = "\n".join(f"{i}. {step}" for i, step in enumerate(e.steps, 1))
        return "plan", f"plan · round {e.round}", steps

    @staticmethod
    def _on_model_called(e: Any) -> tuple[str, str, str]:
        tokens = e.prompt_tokens + e.completion_tokens
        title = f"{e.role} said · round {e.round} · {tokens:,} tokens · {ms_text(e.latency_ms)}"
        return "model", title, e.content or "(no text)"

    @staticmethod
    def _on_decision_made(e: Any) -> tuple[str, str, str]:
        step = f" · plan step {e.plan_step}" if e.plan_step is not None else ""
        return "decision", f"decision · {e.decision} · {e.reason_code or '-'}{step}", e.message

    @staticmethod
    def _on_decision_invalid(e: Any) -> tuple[str, str, str]:
        title = f"reply not usable · correction {e.corrections_used}"
        return "guard", title, e.error

    @staticmethod
    def _on_call_proposed(e: Any) -> Made:
        title = (
            f"call {e.call_id} · {e.tool}({short_args(e.args, 60)}) · {e.risk} · "
            f"fingerprint {e.fingerprint[:12]} · state {e.state_hash[:12]}"
        )
        return "call", title, lambda: visible_json(e.args)

    @staticmethod
    def _on_approval_requested(e: Any) -> tuple[str, str, str]:
        lines = [f"rationale: {e.rationale or 'no text'}"]
        if e.plan_step:
            lines.append(f"plan step: {e.plan_step}")
        if e.asked_again:
            lines.append(f"asked again: {e.asked_again}")
        expires = clock_text(e.expires_at)
        return (
            "approval",
            f"approval asked · {e.call_id} · {e.tool} · expires {expires}",
            ("\n".join(lines)),
        )

    @staticmethod
    def _on_approval_decided(e: Any) -> tuple[str, str, str]:
        verb = "approved" if e.approved else "rejected"
        when = clock_text(e.at)
        return (
            "approval",
            f"{verb} · {e.call_id} · by {e.by} at {when}",
            ("" if e.approved else f"reason: {e.reason or '(none)'}"),
        )

    @staticmethod
    def _on_approval_invalidated(e: Any) -> tuple[str, str, str]:
        return "approval", f"approval no longer valid · {e.call_id} · asked again", e.problem

    @staticmethod
    def _on_approval_withdrawn(e: Any) -> tuple[str, str, str]:
        return "approval", f"approval withdrawn · {e.call_id} · the run stopped", ""

    @staticmethod
    def _on_question_asked(e: Any) -> tuple[str, str, str]:
        return "approval", f"the agent asks you · {e.question_id}", e.question

    @staticmethod
    def _on_question_answered(e: Any) -> tuple[str, str, str]:
        when = clock_text(e.at)
        return "approval", f"answered · {e.question_id} · by {e.by} at {when}", e.answer

    @staticmethod
    def _on_tool_retry(e: Any) -> tuple[str, str, str]:
        return "note", f"retry {e.attempt} · {e.call_id} · {e.tool} in {e.delay_s:g} s", e.error

    @staticmethod
    def _on_tool_finished(e: Any) -> Made:
        status = e.status.value if isinstance(e.status, CallStatus) else str(e.status)
        title = f"result {e.call_id} · {e.tool} · {status} · {ms_text(e.duration_ms)}"
        return "result", title, (lambda: visible_json(e.result)) if e.result else "(no result)"

    @staticmethod
    def _on_guard_tripped(e: Any) -> tuple[str, str, str]:
        title = f"guard · {e.call_id} · {e.tool} repeated from the same state · not executed"
        return "guard", title, f"fingerprint {e.fingerprint}"

    @staticmethod
    def _on_review_verdict(e: Any) -> tuple[str, str, str]:
        reasons = "\n".join(f"· {reason}" for reason in e.reasons)
        return "review", f"review · round {e.round} · {e.verdict.upper()}", reasons

    @staticmethod
    def _on_model_retry(e: Any) -> tuple[str, str, str]:
        return "note", f"model retry {e.attempt} in {e.delay_s:g} s", e.error

    @staticmethod
    def _on_context_compacted(e: Any) -> tuple[str, str, str]:
        title = f"context compacted · {e.tokens_before:,} → {e.tokens_after:,} tokens"
        done = f"{e.results_shortened:,} results shortened, {e.turns_dropped:,} turns dropped"
        return "note", title, f"{e.reason}: {done}"

    @staticmethod
    def _on_operator_command(e: Any) -> tuple[str, str, str]:
        return "note", f"operator · {e.command} · by {e.by}", ""

    @staticmethod
    def _on_run_corrected(e: Any) -> tuple[str, str, str]:
        return "note", "record corrected", e.detail

    @staticmethod
    def _on_recording_held(e: Any) -> tuple[str, str, str]:
        title = f"held · {outage_text(e.cause, e.since, e.spill)}"
        return "note", title, f"{e.detail}; stops after {e.bound_s:g} s"

    @staticmethod
    def _on_recording_resumed(e: Any) -> tuple[str, str, str]:
        return "note", f"resumed · {outage_words(e.cause)} for {e.held_s:.1f} s", ""

    @staticmethod
    def _on_run_stopped(e: Any) -> tuple[str, str, str]:
        reason = e.stop_reason.value if hasattr(e.stop_reason, "value") else str(e.stop_reason)
        state = e.state.value if hasattr(e.state, "value") else str(e.state)
        return "stop", f"stop · {reason.upper()} · {state}", e.detail


# One entry maker per event kind the operator reads (they read only the event).
ENTRY_MAKERS: dict[str, Callable[[Any], Made]] = {
    name.removeprefix("_on_"): getattr(Transcript, name)
    for name in vars(Transcript)
    if name.startswith("_on_")
}
