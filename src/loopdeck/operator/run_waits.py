"""What a run is waiting on, in the operator's words."""

from __future__ import annotations

from typing import TYPE_CHECKING

from loopdeck.core.states import RunState

if TYPE_CHECKING:
    from loopdeck.operator.runview import RunView


def waiting_for(view: RunView) -> str:
    """What the run is waiting on right now, in words."""
    if view.finished:
        return ""
    if view.held == "paused":
        return "you: paused before the next model call (p resumes)"
    if view.store_outage:
        return f"the store: {view.store_outage}"
    return {
        RunState.READY: "the run to start",
        RunState.PLANNING: f"the planner's reply from {view.model}",
        RunState.DECIDING: f"the executor's reply from {view.model}",
        RunState.AWAITING_APPROVAL: "your approval of a write",
        RunState.AWAITING_ANSWER: _question_words(view),
        RunState.EXECUTING: f"the tool {view.tool_running or '…'}",
        RunState.REVIEWING: "the goal check",
    }.get(view.state, "")


def _question_words(view: RunView) -> str:
    topics = {q.topic for q in view.questions.values()}
    if "loop" in topics:
        return "your say on a repeated call (the guard holds it)"
    if "budget" in topics:
        return "your say on a budget past its pause point"
    return "your answer to the agent's question"


def parked_words(view: RunView, workerless: bool = False) -> tuple[str, str]:
    """A run its worker parked (none holds it: it waits on its operator), as `loopdeck runs`
    says it ("parked (paused)"), and what has a worker take it up again (`workerless`: no
    worker runs for its store, so one has to start)."""
    if view.paused:  # a decision taken while it is paused waits for its resume
        under, then = "paused", "on resume"
    else:
        answer = view.state is RunState.AWAITING_ANSWER
        under, then = view.state.value, "once you answer" if answer else "once you decide"
    if workerless:
        return f"parked ({under})", f"no worker runs: one started takes it up {then}"
    return f"parked ({under})", f"a free worker takes it up {then}"
