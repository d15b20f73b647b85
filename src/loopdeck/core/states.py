"""The run's state machine and the closed set of stop reasons."""

from __future__ import annotations

from enum import StrEnum


class RunState(StrEnum):
    READY = "ready"
    PLANNING = "planning"
    DECIDING = "deciding"
    AWAITING_APPROVAL = "awaiting_approval"
    AWAITING_ANSWER = "awaiting_answer"
    EXECUTING = "executing"
    REVIEWING = "reviewing"
    COMPLETE = "complete"
    STOPPED = "stopped"


class StopReason(StrEnum):
    GOAL_MET = "goal_met"
    STALLED = "stalled"
    NO_PROGRESS = "no_progress"
    TURN_LIMIT = "turn_limit"
    TOOL_CALL_LIMIT = "tool_call_limit"
    TOKEN_LIMIT = "token_limit"
    COST_LIMIT = "cost_limit"
    DEADLINE = "deadline"
    ROUND_LIMIT = "round_limit"
    CANCELLED = "cancelled"
    KILLED = "killed"
    ASK_USER = "ask_user"
    HANDOFF = "handoff"
    POLICY_BLOCK = "policy_block"
    TOOL_FAILURE = "tool_failure"
    PROVIDER_FAILURE = "provider_failure"
    INVALID_DECISION = "invalid_decision"
    CRASHED = "crashed"


TERMINAL_STATES = frozenset({RunState.COMPLETE, RunState.STOPPED})

S = RunState
# Every legal move. STOPPED is reachable from every live state (budgets, kill switch,
# failures); COMPLETE only from a passing review.
TRANSITIONS: dict[RunState, frozenset[RunState]] = {
    S.READY: frozenset({S.PLANNING, S.DECIDING, S.STOPPED}),
    S.PLANNING: frozenset({S.DECIDING, S.STOPPED}),
    S.DECIDING: frozenset(
        {S.AWAITING_APPROVAL, S.AWAITING_ANSWER, S.EXECUTING, S.REVIEWING, S.STOPPED}
    ),
    S.AWAITING_APPROVAL: frozenset({S.DECIDING, S.EXECUTING, S.STOPPED}),
    S.AWAITING_ANSWER: frozenset({S.DECIDING, S.STOPPED}),
    S.EXECUTING: frozenset({S.DECIDING, S.REVIEWING, S.STOPPED}),
    S.REVIEWING: frozenset({S.PLANNING, S.DECIDING, S.COMPLETE, S.STOPPED}),
    S.COMPLETE: frozenset(),
    S.STOPPED: frozenset(),
}


class IllegalTransition(RuntimeError):
    def __init__(self, source: RunState, target: RunState) -> None:
        super().__init__(f"illegal transition {source.value} -> {target.value}")
        self.source = source
        self.target = target


class StateMachine:
    """Holds the current state and counts every transition taken."""

    def __init__(self) -> None:
        self.state = RunState.READY
        self.counts: dict[tuple[RunState, RunState], int] = {}

    def can_move(self, target: RunState) -> bool:
        return target in TRANSITIONS[self.state]

    def move(self, target: RunState) -> RunState:
        if not self.can_move(target):
            raise IllegalTransition(self.state, target)
        source = self.state
        self.counts[(source, target)] = self.counts.get((source, target), 0) + 1
        self.state = target
        return source

    @property
    def is_terminal(self) -> bool:
        return self.state in TERMINAL_STATES
