"""The safety promises at the edges: a write runs at most once, one canonical form of
arguments, env code off the event loop, capped errors, and the held-back gaps (issue 8)."""

from __future__ import annotations

import asyncio
import json
import time
import unicodedata
from datetime import UTC, datetime
from decimal import Decimal
from enum import Enum
from pathlib import Path

from conftest import EDGES, SAMPLES, prepare
from fake_models import ReplayModel, calls

from loopdeck.core.approvals import ApprovalDecision
from loopdeck.core.dispatcher import _jsonable
from loopdeck.core.events import CallStatus
from loopdeck.core.states import StopReason


async def until(condition, timeout: float = 60.0) -> None:
    """Wait on a condition, never on a fixed sleep; the timeout only ends a broken test."""
    end = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < end, "condition never became true"
        await asyncio.sleep(0.02)


def log_lines(workdir: Path) -> list[str]:
    log = workdir / "writes.log"
    return log.read_text().splitlines() if log.exists() else []


async def test_a_write_past_its_timeout_runs_once_and_is_outcome_unknown() -> None:
    prepared, rec = prepare(EDGES, "slow-write")
    try:
        outcome = await prepared.runtime.run()
        # the timed-out thread still finishes its write: exactly one line, never four
        await until(lambda: len(log_lines(prepared.workdir)) >= 1)
        await until(lambda: prepared.runtime.env_thread.stray is None)
        assert log_lines(prepared.workdir) == ["sleepy_write 1.5"]
    finally:
        prepared.cleanup()
    statuses = [c.status for c in outcome.calls]
    assert statuses == [CallStatus.OUTCOME_UNKNOWN, CallStatus.REFUSED_DUPLICATE]
    first = outcome.calls[0].result
    assert first["error"]["code"] == "OUTCOME_UNKNOWN"
    assert "may or may not" in first["error"]["message"]
    assert not rec.kinds("tool_retry"), "a write is never retried"


async def test_arguments_that_differ_only_in_type_are_one_write() -> None:
    prepared, _ = prepare(EDGES, "replicas-variants")
    try:
        outcome = await prepared.runtime.run()
        assert log_lines(prepared.workdir) == ["set_replicas 3"]
    finally:
        prepared.cleanup()
    assert [c.args for c in outcome.calls] == [{"replicas": 3}] * 3
    assert all(type(c.args["replicas"]) is int for c in outcome.calls)
    assert outcome.calls[0].status is CallStatus.EXECUTED
    assert {c.status for c in outcome.calls[1:]} <= {
        CallStatus.REFUSED_DUPLICATE,
        CallStatus.BLOCKED_REPEAT,
    }


async def test_an_nfd_spelling_of_an_approved_write_is_the_same_write() -> None:
    prepared, rec = prepare(EDGES, "nfd-variant")
    try:
        outcome = await prepared.runtime.run()
        assert log_lines(prepared.workdir) == ["write_note 'café'"]
    finally:
        prepared.cleanup()
    assert [c.status for c in outcome.calls] == [
        CallStatus.EXECUTED,
        CallStatus.REFUSED_DUPLICATE,
    ]
    assert all(unicodedata.is_normalized("NFC", c.args["text"]) for c in outcome.calls)
    # what the operator approved is what ran: the request carries the canonical form
    assert rec.kinds("approval_requested")[0].args == {"text": "café"}


async def test_the_guard_key_and_fingerprint_use_the_canonical_form() -> None:
    model = ReplayModel(
        [
            calls(("set_replicas", {"replicas": 2})),
            calls(("block_goal_check", {"seconds": 0})),
            calls(("block_goal_check", {"seconds": "0"})),
        ]
    )
    prepared, _ = prepare(EDGES, "replicas-variants")
    prepared.runtime.model = model
    try:
        outcome = await prepared.runtime.run()
    finally:
        prepared.cleanup()
    reads = [c for c in outcome.calls if c.tool == "block_goal_check"]
    assert reads[0].fingerprint == reads[1].fingerprint
    assert [c.status for c in reads] == [CallStatus.EXECUTED, CallStatus.BLOCKED_REPEAT]
    assert reads[1].args == {"seconds": 0.0}


async def test_after_a_guard_trip_the_rest_of_the_reply_is_not_executed() -> None:
    reply = calls(
        ("block_goal_check", {"seconds": 0}),
        ("block_goal_check", {"seconds": 0}),
        ("write_note", {"text": "done"}),
    )
    prepared, rec = prepare(EDGES, "replicas-variants")
    prepared.runtime.model = ReplayModel([reply])
    try:
        outcome = await prepared.runtime.run()
        assert log_lines(prepared.workdir) == []
    finally:
        prepared.cleanup()
    assert [c.status for c in outcome.calls] == [
        CallStatus.EXECUTED,
        CallStatus.BLOCKED_REPEAT,
        CallStatus.SKIPPED_AFTER_TRIP,
    ]
    assert not rec.kinds("approval_requested"), "the skipped write never reached the operator"
    # every call of the reply still got its tool result, as providers require
    executor = prepared.runtime.model.requests[-1]
    answered = [m.get("tool_call_id") for m in executor.messages if m["role"] == "tool"]
    assert answered[:3] == ["call_0", "call_1", "call_2"]


async def test_a_met_goal_stops_an_exempt_polling_loop_at_once() -> None:
    prepared, rec = prepare(EDGES, "poll-job")
    try:
        outcome = await prepared.runtime.run()
    finally:
        prepared.cleanup()
    assert outcome.stop_reason is StopReason.GOAL_MET
    assert outcome.tool_calls == 3  # the poll that saw the job finish, and no more
    assert rec.kinds("review_verdict")[-1].verdict == "pass"


async def test_a_state_change_at_dispatch_asks_again() -> None:
    class ChangesStateThenApproves:
        def __init__(self) -> None:
            self.asked = 0
            self.env = None

        async def ask(self, request):
            self.asked += 1
            if self.asked == 1:
                self.env.replicas = 7  # the world moves between the approval and the dispatch
            return ApprovalDecision(call_id=request.call_id, approved=True, by="test")

    approver = ChangesStateThenApproves()
    prepared, rec = prepare(EDGES, "double-note", approver=approver)
    approver.env = prepared.runtime.env
    try:
        outcome = await prepared.runtime.run()
    finally:
        prepared.cleanup()
    assert approver.asked >= 2
    assert (
        rec.kinds("approval_invalidated")[0].problem == "environment state changed since approval"
    )
    assert outcome.calls[0].status is CallStatus.EXECUTED
    assert outcome.stop_reason is not StopReason.POLICY_BLOCK


async def test_a_kill_during_a_blocking_goal_check_stops_at_once() -> None:
    prepared, _ = prepare(EDGES, "block-check")
    env = prepared.runtime.env
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0.01)

    async def kill_during_check() -> None:
        await until(lambda: env.checks_running == 1)
        seen = ticks
        await until(lambda: ticks > seen + 3)  # the loop keeps turning while the check blocks
        prepared.runtime.kill("test")

    beat = asyncio.create_task(ticker())
    killer = asyncio.create_task(kill_during_check())
    try:
        outcome = await prepared.runtime.run()
        checking = env.checks_running
    finally:
        beat.cancel()
        killer.cancel()
        prepared.cleanup()
    assert outcome.stop_reason is StopReason.KILLED
    assert checking == 1, "the run stopped while the goal check still blocked"
    assert outcome.stray is not None and "goal check" in outcome.stray
    assert "discarded" in outcome.detail


async def test_env_code_still_running_stops_the_run_naming_the_tool() -> None:
    prepared, _ = prepare(EDGES, "stray-read")
    prepared.runtime.env_thread.stray_wait_s = 0.2
    try:
        outcome = await prepared.runtime.run()
    finally:
        prepared.cleanup()
    assert outcome.stop_reason is StopReason.TOOL_FAILURE
    assert "sleepy_read" in outcome.detail and "still running" in outcome.detail


async def test_a_write_still_running_after_its_timeout_stops_the_goal_check_naming_it() -> None:
    """The goal check after an outcome-unknown write takes the snapshot queued behind the
    write (issue 11): it waits for the write only up to the bound, as any env call does."""
    prepared, _ = prepare(EDGES, "slow-write")
    prepared.runtime.env_thread.stray_wait_s = 0.2
    try:
        outcome = await prepared.runtime.run()
        await until(lambda: prepared.runtime.env_thread.stray is None)
        assert log_lines(prepared.workdir) == ["sleepy_write 1.5"]
    finally:
        prepared.cleanup()
    assert outcome.stop_reason is StopReason.TOOL_FAILURE
    assert "sleepy_write" in outcome.detail and "still running" in outcome.detail
    assert [c.status for c in outcome.calls] == [CallStatus.OUTCOME_UNKNOWN]


async def test_huge_tool_errors_reach_the_model_capped() -> None:
    prepared, rec = prepare(EDGES, "shout")
    try:
        outcome = await prepared.runtime.run()
    finally:
        prepared.cleanup()
    for call in outcome.calls:
        assert len(json.dumps(call.result)) < 5000
        assert "truncated" in call.result["error"]["message"]
    assert max(len(e.model_dump_json()) for e in rec.events) < 20_000
    assert outcome.tokens < 50_000
    assert outcome.stop_reason is not StopReason.CRASHED


async def test_results_that_are_not_json_are_tool_errors() -> None:
    prepared, _ = prepare(EDGES, "odd-result")
    try:
        outcome = await prepared.runtime.run()
    finally:
        prepared.cleanup()
    assert [c.result["error"]["code"] for c in outcome.calls] == ["INVALID_RESULT"] * 3
    assert "object <object object at" in outcome.calls[2].result["error"]["message"]
    assert outcome.stop_reason is not StopReason.CRASHED


def test_values_json_has_no_type_for_are_sent_in_their_json_form() -> None:
    class Colour(Enum):
        RED = 1

    at = datetime(2026, 12, 6, 10, 0, tzinfo=UTC)
    data, _ = _jsonable({"at": at, "n": Decimal("1.50"), "c": Colour.RED, "s": {3, 1}, "p": (1,)})
    assert data == {"at": at.isoformat(), "n": "1.50", "c": 1, "s": [1, 3], "p": [1]}


async def test_sample_env_writes_see_canonical_arguments() -> None:
    model = ReplayModel([calls(("scale_service", {"replicas": True}))])
    prepared, rec = prepare(SAMPLES / "service_outage", "solve")
    prepared.runtime.model = model
    try:
        await prepared.runtime.run()
        replicas = prepared.runtime.env.replicas
    finally:
        prepared.cleanup()
    # the operator is shown what the tool runs with, never the raw `true`
    assert rec.kinds("approval_requested")[0].args == {"replicas": 1}
    assert replicas == 1
