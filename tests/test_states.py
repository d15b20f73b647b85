import pytest

from loopdeck.core.states import (
    TRANSITIONS,
    IllegalTransition,
    RunState,
    StateMachine,
    StopReason,
)


def test_every_state_has_a_row_and_terminal_states_have_no_exit() -> None:
    assert set(TRANSITIONS) == set(RunState)
    assert TRANSITIONS[RunState.COMPLETE] == frozenset()
    assert TRANSITIONS[RunState.STOPPED] == frozenset()


def test_every_live_state_can_stop() -> None:
    for state, targets in TRANSITIONS.items():
        if state not in (RunState.COMPLETE, RunState.STOPPED):
            assert RunState.STOPPED in targets


def test_illegal_transition_raises_and_leaves_state() -> None:
    machine = StateMachine()
    with pytest.raises(IllegalTransition, match="ready -> executing"):
        machine.move(RunState.EXECUTING)
    assert machine.state is RunState.READY


def test_transitions_are_counted() -> None:
    machine = StateMachine()
    machine.move(RunState.DECIDING)
    machine.move(RunState.EXECUTING)
    machine.move(RunState.DECIDING)
    machine.move(RunState.EXECUTING)
    assert machine.counts[(RunState.DECIDING, RunState.EXECUTING)] == 2


def test_stop_reasons_are_the_closed_set_of_the_design() -> None:
    assert {r.value for r in StopReason} == {
        "goal_met", "stalled", "no_progress", "turn_limit", "tool_call_limit", "token_limit",
        "cost_limit", "deadline", "round_limit", "cancelled", "killed", "ask_user", "handoff",
        "policy_block", "tool_failure", "provider_failure", "invalid_decision", "crashed",
    }  # fmt: skip
