"""The no-progress guard, exempt polling tools, the dispatcher's retries and failures."""

import asyncio

from conftest import HARNESS, run_env

from loopdeck.core.dispatcher import Dispatcher
from loopdeck.core.environment import Environment, tool
from loopdeck.core.events import CallStatus
from loopdeck.core.guard import NoProgressGuard, guard_key
from loopdeck.core.states import StopReason
from loopdeck.core.tools import ErrorCode, ToolError


def test_guard_blocks_the_same_call_from_the_same_state_only() -> None:
    guard = NoProgressGuard()
    assert guard.admit(guard_key("t", {"a": 1, "b": 2}, "s1"))
    assert not guard.admit(guard_key("t", {"b": 2, "a": 1}, "s1"))  # key order is irrelevant
    assert guard.admit(guard_key("t", {"a": 1, "b": 2}, "s2"))  # state changed
    assert guard.admit(guard_key("t", {"a": 2, "b": 2}, "s1"))  # args changed
    assert guard.admit(guard_key("t", {"a": 1, "b": 2}, "s1"), exempt=True)
    assert guard.trips == 1


async def test_exempt_polling_tool_is_never_blocked_and_a_cap_stops_it() -> None:
    outcome, rec = await run_env(HARNESS, "poll", max_tool_calls=15, max_turns=100)
    assert outcome.stop_reason is StopReason.TOOL_CALL_LIMIT
    assert all(c.status is CallStatus.EXECUTED for c in outcome.calls[:15])
    assert [c.status for c in outcome.calls[15:]] == [CallStatus.SKIPPED]
    assert outcome.tool_calls == 15
    assert rec.kinds("guard_tripped") == []


async def test_repeat_is_replaced_by_an_error_result_the_model_sees() -> None:
    outcome, rec = await run_env(HARNESS, "echo-loop")
    blocked = [c for c in outcome.calls if c.status is CallStatus.BLOCKED_REPEAT]
    assert len(blocked) == 1
    assert blocked[0].result["error"]["code"] == "REPEATED_CALL"
    assert outcome.stop_reason is StopReason.STALLED
    assert len(rec.kinds("guard_tripped")) == 1


async def test_transient_failures_are_retried_visibly() -> None:
    outcome, rec = await run_env(HARNESS, "flaky")
    assert outcome.stop_reason is StopReason.GOAL_MET
    assert [r.attempt for r in rec.kinds("tool_retry")] == [1, 2]
    assert outcome.calls[0].status is CallStatus.EXECUTED


async def test_unrecoverable_failures_reach_the_model_then_stop_the_run() -> None:
    outcome, _ = await run_env(HARNESS, "broken")
    assert outcome.stop_reason is StopReason.TOOL_FAILURE
    assert [c.status for c in outcome.calls] == [CallStatus.FAILED] * 3
    assert outcome.calls[0].result["error"]["code"] == "TOOL_CRASHED"
    assert "broken tool, attempt 1" in outcome.calls[0].result["error"]["message"]


async def test_large_results_are_capped_with_a_visible_marker() -> None:
    outcome, _ = await run_env(HARNESS, "huge")
    result = outcome.calls[0].result
    assert result["truncated"] is True
    assert "[truncated" in result["data"]
    assert len(result["data"]) < 4200


async def test_malformed_arguments_are_corrected_within_budget() -> None:
    outcome, rec = await run_env(HARNESS, "bad-args")
    assert outcome.stop_reason is StopReason.GOAL_MET
    errors = [e.error for e in rec.kinds("decision_invalid")]
    assert len(errors) == 2
    assert "words" in errors[0] and "text" in errors[1]


async def test_a_timed_out_read_is_tried_again_once_then_reported() -> None:
    """A timeout is not a dropped connection: a read that hung is tried once more, not three
    times (each try costs its whole timeout)."""

    class Slow(Environment):
        def snapshot(self):
            return {}

        def unmet(self, snapshot):
            return []

        @tool(timeout_s=0.05)
        async def sleepy(self, args):
            """Never answers in time."""
            await asyncio.sleep(1)

    spec = Slow(None, {}).tools()[0]  # type: ignore[arg-type]
    retries = []
    result = await Dispatcher(backoff_s=0.001).run(
        spec, "c1", {}, on_retry=lambda a, e, d: retries.append(a)
    )
    assert not result.ok and result.error.code is ErrorCode.TIMEOUT
    assert retries == [1]
    assert result.provenance.attempts == 2


async def test_a_read_that_fails_transiently_is_tried_again_three_times() -> None:
    class Busy(Environment):
        @tool()
        def flaky(self, args):
            """Always busy."""
            raise ToolError(ErrorCode.TEMPORARY_UNAVAILABLE, "busy")

    spec = Busy(None, {}).tools()[0]  # type: ignore[arg-type]
    retries = []
    result = await Dispatcher(backoff_s=0.001).run(
        spec, "c1", {}, on_retry=lambda a, e, d: retries.append(a)
    )
    assert result.error.code is ErrorCode.TEMPORARY_UNAVAILABLE
    assert retries == [1, 2, 3] and result.provenance.attempts == 4


async def test_tool_error_codes_pass_through() -> None:
    class Env(Environment):
        @tool()
        def missing(self, args):
            """Not found."""
            raise ToolError(ErrorCode.NOT_FOUND, "no such thing")

    spec = Env(None, {}).tools()[0]  # type: ignore[arg-type]
    result = await Dispatcher().run(spec, "c9", {})
    assert result.error.code is ErrorCode.NOT_FOUND
    assert result.provenance.tool == "missing" and result.provenance.call_id == "c9"
