"""Decisions beyond yes and no, in the runtime (issue 27): an edit before approving, standing
grants, an unknown outcome resolved by the operator, a tool's definite failure."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import prepare

from loopdeck.core.approvals import ApprovalDecision, ApprovalRequest
from loopdeck.core.events import ApprovalDecided, CallStatus
from loopdeck.core.grant_rules import GrantRule, GrantRuleError
from loopdeck.core.states import StopReason
from loopdeck.core.unknown_outcomes import Unresolvable

DECISIONS = Path(__file__).parent / "envs" / "decisions"


class Operator:
    """Decides each ask with the next of `answers` (a function of the request), recording
    what it was asked."""

    def __init__(self, *answers: Any) -> None:
        self.answers = list(answers)
        self.asked: list[ApprovalRequest] = []
        self.runtime: Any = None

    async def ask(self, request: ApprovalRequest) -> ApprovalDecision:
        self.asked.append(request)
        answer = self.answers.pop(0) if self.answers else None
        if callable(answer):
            return answer(request, self.runtime)
        return ApprovalDecision(call_id=request.call_id, approved=True, by="op")


async def _run(script: str, operator: Operator, on_event: Any = None) -> tuple[Any, Any, Any]:
    prepared, recorder = prepare(DECISIONS, script, approver=operator)
    operator.runtime = prepared.runtime
    env = prepared.runtime.env
    if on_event is not None:
        prepared.runtime.bus.subscribe(on_event)
    try:
        outcome = await prepared.runtime.run()
    finally:
        prepared.cleanup()
    return outcome, recorder, env


def _approve(**fields: Any) -> Any:
    return lambda request, _rt: ApprovalDecision(
        call_id=request.call_id, approved=True, by="op", **fields
    )


async def test_an_edit_runs_the_edited_arguments_and_the_model_is_told() -> None:
    edited = {"path": "src/z.txt", "content": "a"}
    operator = Operator(_approve(args=edited))
    outcome, rec, env = await _run("files", operator)
    assert outcome.stop_reason is StopReason.GOAL_MET, outcome.detail
    assert "src/z.txt" in env.files and "src/a.txt" not in env.files
    decided = rec.kinds("approval_decided")[0]
    assert decided.args == edited
    assert decided.changes == ['path: "src/a.txt" → "src/z.txt"']
    first = outcome.calls[0]
    assert first.args == edited and first.status is CallStatus.EXECUTED
    # The request's schema is the tool's, for whoever edits.
    assert operator.asked[0].args_schema["properties"]["path"]["type"] == "string"


async def test_an_edit_the_tool_refuses_is_asked_again_never_run() -> None:
    operator = Operator(_approve(args={"path": "src/a.txt", "content": 5, "extra": 1}))
    outcome, rec, env = await _run("files", operator)
    assert outcome.stop_reason is StopReason.GOAL_MET, outcome.detail
    [invalidated] = rec.kinds("approval_invalidated")
    assert invalidated.problem.startswith("the operator's edited arguments are refused")
    assert len(operator.asked) == 7  # the first call asked twice, then one ask per write
    assert operator.asked[1].asked_again == invalidated.problem
    assert env.files["src/a.txt"] == "a"


async def test_an_edit_into_a_write_that_already_ran_is_refused_as_a_duplicate() -> None:
    operator = Operator(None, _approve(args={"path": "src/a.txt", "content": "a"}))
    outcome, _, env = await _run("files", operator)
    second = outcome.calls[1]
    assert second.status is CallStatus.REFUSED_DUPLICATE
    assert env.runs["write_file"] == 5  # a, (b refused), c, d, e, DONE


async def test_a_grant_used_three_times_then_revoked_asks_the_fourth() -> None:
    operator = Operator(_approve(grant=GrantRule(scope="fields", fields={"path": "src/*"})))
    revoked: list[str | None] = []

    def on_event(event: Any) -> None:
        if isinstance(event, ApprovalDecided) and event.grant_id and event.call_id == "c4":
            revoked.append(operator.runtime.revoke("g1", by="op2"))

    outcome, rec, _ = await _run("files", operator, on_event)
    assert outcome.stop_reason is StopReason.GOAL_MET, outcome.detail
    assert revoked == [None]
    by_grant = [e for e in rec.kinds("approval_decided") if e.grant_id]
    assert [e.call_id for e in by_grant] == ["c2", "c3", "c4"]
    assert all(e.by == "grant g1, granted by op" for e in by_grant)
    # c5 (src/e.txt) and c6 (DONE, never covered) were asked
    assert [r.call_id for r in operator.asked] == ["c1", "c5", "c6"]
    assert [e.grant_id for e in rec.kinds("grant_revoked")] == ["g1"]
    # every granted call is still a recorded approval: requested, then decided
    requested = [e.call_id for e in rec.kinds("approval_requested")]
    assert requested == ["c1", "c2", "c3", "c4", "c5", "c6"]
    assert operator.runtime.revoke("g1") == "grant g1 was already revoked by op2"


async def test_a_grant_for_n_uses_asks_again_after_them() -> None:
    operator = Operator(_approve(grant=GrantRule.parse("tool", uses=2)))
    _, rec, _ = await _run("files", operator)
    assert [r.call_id for r in operator.asked] == ["c1", "c4", "c5", "c6"]
    assert [e.call_id for e in rec.kinds("approval_decided") if e.grant_id] == ["c2", "c3"]


async def test_an_exact_grant_covers_only_the_same_arguments() -> None:
    operator = Operator(_approve(grant=GrantRule(scope="exact")))
    await _run("files", operator)
    assert len(operator.asked) == 6  # every file is another argument


async def test_a_granted_call_whose_state_changed_before_dispatch_asks_the_operator() -> None:
    operator = Operator(_approve(grant=GrantRule(scope="tool")))

    def on_event(event: Any) -> None:
        if isinstance(event, ApprovalDecided) and event.grant_id == "g1" and event.call_id == "c2":
            operator.runtime.env.files["drift"] = "moved"  # the world moves under the call

    outcome, rec, _ = await _run("files", operator, on_event)
    assert outcome.stop_reason is StopReason.GOAL_MET, outcome.detail
    assert [r.call_id for r in operator.asked] == ["c1", "c2"]
    assert operator.asked[1].asked_again == "environment state changed since approval"
    assert [e.problem for e in rec.kinds("approval_invalidated")] == [
        "environment state changed since approval"
    ]


async def test_not_applied_frees_the_key_and_the_retry_runs_exactly_once() -> None:
    said: list[str] = []

    def resolve_then_approve(request: ApprovalRequest, runtime: Any) -> ApprovalDecision:
        runtime.resolve("c1", applied=False, by="op")
        said.extend(runtime.messages.waiting)
        return ApprovalDecision(call_id=request.call_id, approved=True, by="op")

    operator = Operator(None, resolve_then_approve)  # c2: the write after the unknown
    outcome, rec, env = await _run("retry", operator)
    assert outcome.stop_reason is StopReason.GOAL_MET, outcome.detail
    statuses = {c.call_id: c.status for c in outcome.calls}
    assert statuses == {
        "c1": CallStatus.FAILED,  # resolved: it did not take effect
        "c2": CallStatus.EXECUTED,
        "c3": CallStatus.EXECUTED,  # the retry: asked, ran once
        "c4": CallStatus.REFUSED_DUPLICATE,
        "c5": CallStatus.EXECUTED,
    }
    assert env.transformed == ["x"] and env.runs["transform"] == 1
    assert [r.call_id for r in operator.asked] == ["c1", "c2", "c3", "c5"]
    [resolved] = rec.kinds("outcome_resolved")
    assert (resolved.call_id, resolved.applied, resolved.by) == ("c1", False, "op")
    assert "did not take effect" in said[0] and "propose it again" in said[0]


async def test_applied_records_the_write_executed_and_its_retry_stays_refused() -> None:
    def resolve_applied(request: ApprovalRequest, runtime: Any) -> ApprovalDecision:
        runtime.resolve("c1", applied=True, by="op")
        with pytest.raises(Unresolvable):
            runtime.resolve("c1", applied=False, by="op2")  # one word per call
        return ApprovalDecision(call_id=request.call_id, approved=True, by="op")

    outcome, rec, env = await _run("retry", Operator(None, resolve_applied))
    assert outcome.calls[0].status is CallStatus.EXECUTED
    assert outcome.calls[2].status is CallStatus.REFUSED_DUPLICATE
    assert env.runs.get("transform", 0) == 0
    assert [e.applied for e in rec.kinds("outcome_resolved")] == [True]


async def test_nobody_resolves_it_and_the_retry_is_refused_as_before() -> None:
    outcome, _, env = await _run("retry", Operator())
    assert outcome.calls[0].status is CallStatus.OUTCOME_UNKNOWN
    assert outcome.calls[2].status is CallStatus.REFUSED_DUPLICATE
    assert env.runs.get("transform", 0) == 0


async def test_a_definite_failure_leaves_the_key_unspent() -> None:
    outcome, _, env = await _run("definite", Operator())
    assert outcome.stop_reason is StopReason.GOAL_MET, outcome.detail
    publish = [c for c in outcome.calls if c.tool == "publish"]
    assert [c.status for c in publish] == [CallStatus.FAILED, CallStatus.EXECUTED]
    assert publish[0].result["error"]["code"] == "CONFLICT"
    assert env.runs["publish"] == 1


def test_grant_rules_read_as_written_and_refuse_a_way_out_of_their_folder() -> None:
    rule = GrantRule.parse("path=src/*", uses=3, for_s=600)
    assert rule.words() == "path=src/*, 3 uses, 600s"
    assert rule.covers_args({}, {"path": "src/deep/a.txt", "content": "x"})
    assert not rule.covers_args({}, {"path": "src/../etc/passwd", "content": "x"})
    assert not rule.covers_args({}, {"path": "docs/a.txt"})
    assert not rule.covers_args({}, {"content": "no path"})
    assert GrantRule.parse("tool").covers_args({}, {"anything": 1})
    exact = GrantRule.parse("exact")
    assert exact.covers_args({"a": 1, "b": "x"}, {"b": "x", "a": 1})
    assert not exact.covers_args({"a": 1}, {"a": "1"})  # a type apart is another call
    for bad in ("everything", "=x", "path", "path=src/*,"):
        with pytest.raises(GrantRuleError):
            GrantRule.parse(bad)


# -- what the provider is sent: checked by the strict loopback OpenAI server ----------------
HOSTILE = "\x1b[2J\x00\x07\u202eevil\u2066x\u2069 [b]bold[/] " + "A" * 1_000_000


def _strict_run(env: Path, replies: list[Any], operator: Operator) -> tuple[Any, Any]:
    from test_provider_message_order import StrictOpenAI

    from loopdeck.operator.launch import RunOptions, prepare_run

    async def go() -> tuple[Any, Any]:
        with StrictOpenAI(replies) as server:
            options = RunOptions(
                env=str(env), model="openai/gpt-4o-mini", api_base=server.url, mode="react",
                approve="auto",
            )  # fmt: skip
            prepared = prepare_run(options, approver=operator)
            operator.runtime = prepared.runtime
            try:
                outcome = await prepared.runtime.run()
            finally:
                prepared.cleanup()
        assert not server.refused, (outcome.stop_reason, server.refused)
        return outcome, server

    return go()  # type: ignore[return-value]


@pytest.fixture
def _key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-loopback")


@pytest.mark.usefixtures("_key")
async def test_an_edit_inside_a_batch_is_told_after_its_last_result_capped_and_escaped() -> None:
    from conftest import HARNESS
    from test_provider_message_order import calls, order_problems

    batch = calls(
        ("call_a", "echo", {"text": "a"}),
        ("call_w", "write_note", {"text": "draft"}),
        ("call_b", "echo", {"text": "b"}),
    )
    done = calls(("call_d", "write_note", {"text": "done"}))
    operator = Operator(_approve(args={"text": HOSTILE}), None)
    outcome, server = await _strict_run(HARNESS, [batch, done], operator)
    assert outcome.stop_reason is StopReason.GOAL_MET, outcome.detail
    last = server.requests[-1]["messages"]
    at = next(i for i, m in enumerate(last) if m.get("tool_calls"))
    tail = last[at:]
    assert [m["role"] for m in tail] == ["assistant", "tool", "tool", "tool", "user"]
    note = tail[4]["content"]
    assert note.startswith("The operator says: I edited the arguments of your write_note call")
    assert len(note) < 1000 and "\x1b" not in note and "\u202e" not in note
    assert "\\u001b" in note or "\\x1b" in note  # shown as an escape, never obeyed
    assert all(not order_problems(r["messages"]) for r in server.requests)


@pytest.mark.usefixtures("_key")
async def test_a_resolution_reaches_the_next_request_as_the_operators_words() -> None:
    from test_provider_message_order import calls, order_problems

    def resolve_then_approve(request: ApprovalRequest, runtime: Any) -> ApprovalDecision:
        runtime.resolve("c1", applied=False, by="op")
        return ApprovalDecision(call_id=request.call_id, approved=True, by="op")

    replies = [
        calls(("call_t", "transform", {"name": "x"})),
        calls(("call_w", "write_file", {"path": "notes.txt", "content": "between"})),
        calls(("call_r", "transform", {"name": "x"})),
        calls(("call_d", "write_file", {"path": "DONE", "content": "yes"})),
    ]
    operator = Operator(None, resolve_then_approve)
    outcome, server = await _strict_run(DECISIONS, replies, operator)
    assert outcome.stop_reason is StopReason.GOAL_MET, outcome.detail
    third = server.requests[2]["messages"]
    assert [m["role"] for m in third[-3:]] == ["assistant", "tool", "user"]
    assert "transform" in third[-1]["content"] and "did not take effect" in third[-1]["content"]
    assert outcome.calls[2].status is CallStatus.EXECUTED
    assert all(not order_problems(r["messages"]) for r in server.requests)


async def test_a_message_still_waiting_at_the_stop_is_recorded_unheard() -> None:
    def speak_then_stop(request: ApprovalRequest, runtime: Any) -> ApprovalDecision:
        runtime.message("hold off on the rest", by="op")
        runtime.cancel(after_current_tools=True, by="op")
        return ApprovalDecision(call_id=request.call_id, approved=True, by="op")

    outcome, rec, _ = await _run("files", Operator(speak_then_stop))
    assert outcome.stop_reason is StopReason.CANCELLED
    [stopped] = rec.kinds("run_stopped")
    assert stopped.unheard == ["hold off on the rest"]
    from loopdeck.operator.transcript import Transcript

    transcript = Transcript()
    for event in rec.events:
        transcript.apply(event)  # type: ignore[arg-type]
    assert "never heard by the model: hold off on the rest" in transcript.entries[-1].text


async def test_an_edit_asked_again_after_the_state_moved_keeps_the_operators_arguments() -> None:
    edited = {"path": "src/z.txt", "content": "a"}
    operator = Operator(_approve(args=edited), None)

    def on_event(event: Any) -> None:
        if isinstance(event, ApprovalDecided) and event.args == edited:
            operator.runtime.env.files["drift"] = "moved"  # the world moves under the call

    outcome, rec, env = await _run("files", operator, on_event)
    assert outcome.stop_reason is StopReason.GOAL_MET, outcome.detail
    assert operator.asked[1].call_id == "c1" and operator.asked[1].args == edited
    assert "src/z.txt" in env.files and "src/a.txt" not in env.files
    second = [e for e in rec.kinds("approval_decided") if e.call_id == "c1"][1]
    assert second.changes == ['path: "src/a.txt" → "src/z.txt"']  # still said to the model
