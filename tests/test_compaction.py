"""Context management: the task is pinned, the oldest results get shorter, then the oldest
turns go whole (a call never without its result), and a declared window bounds every prompt."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from conftest import HARNESS, Recorder, prepare
from rich.console import Console

from loopdeck.cli.summary import print_summary
from loopdeck.core.compaction import ContextWindow, dropped_turns, shortened
from loopdeck.core.events import EventBus
from loopdeck.core.prompts import EXECUTOR_SYSTEM, tool_result_message
from loopdeck.llm import scripted_provider
from loopdeck.llm.script_player import prompt_tokens
from loopdeck.operator.launch import RunOptions, prepare_run
from loopdeck.operator.runview import RunView
from loopdeck.operator.transcript import Transcript

Message = dict[str, Any]
HEAD: list[Message] = [
    {"role": "system", "content": "rules " * 20},
    {"role": "user", "content": "PLAN\n1. poll until the job is done"},
]


def _count(messages: list[Message]) -> int:
    chars = sum(len(str(m.get("content") or "")) for m in messages)
    chars += sum(len(json.dumps(m["tool_calls"])) for m in messages if m.get("tool_calls"))
    return math.ceil(chars / 4)


def _turn(i: int, calls: int = 1, native: bool = True) -> list[Message]:
    """One assistant turn and its results: native tool calls, or the envelope with its result
    as fenced data (a model without tools)."""
    payload = {"ok": True, "data": {"log": f"line {i} " + "x" * 300}, "error": None}
    if not native:
        reply = {"type": "tool_call", "tool_name": "poll", "arguments": {}, "reason_code": "POLL"}
        return [
            {"role": "assistant", "content": json.dumps(reply)},
            tool_result_message(None, payload),
        ]
    ids = [f"t{i}_{k}" for k in range(calls)]
    assistant = {
        "role": "assistant",
        "content": f"Step 1 (turn {i})",
        "tool_calls": [
            {"id": id_, "type": "function", "function": {"name": "poll", "arguments": "{}"}}
            for id_ in ids
        ],
    }
    return [assistant] + [tool_result_message(id_, payload) for id_ in ids]


def _conversation(turns: int) -> list[Message]:
    messages = [dict(m) for m in HEAD]
    for i in range(turns):
        messages += _turn(i, calls=1 + i % 3, native=i % 4 != 3)
        if i % 10 == 9:
            messages.append({"role": "user", "content": f"The goal check reports: round {i}"})
    return messages


def pairing_problems(messages: list[Message]) -> list[str]:
    """What an OpenAI-compatible provider would refuse: a system message past the first, a
    message with tool calls not followed at once by exactly its results, a result without its
    call, a call id used twice."""
    problems = []
    seen: set[str] = set()
    i = 0
    while i < len(messages):
        message = messages[i]
        role = message.get("role")
        if role not in ("system", "user", "assistant", "tool"):
            problems.append(f"{i}: role {role!r}")
        if role == "system" and i:
            problems.append(f"{i}: a system message after the first")
        if role == "tool":
            problems.append(f"{i}: a tool result without its call")
        if role == "assistant" and message.get("tool_calls"):
            ids = [c["id"] for c in message["tool_calls"]]
            results = messages[i + 1 : i + 1 + len(ids)]
            answered = [m.get("tool_call_id") for m in results if m.get("role") == "tool"]
            if answered != ids:
                problems.append(f"{i}: calls {ids} answered by {answered}")
            if seen & set(ids):
                problems.append(f"{i}: call ids used again: {sorted(seen & set(ids))}")
            seen |= set(ids)
            i += 1 + len(answered)
            continue
        i += 1
    return problems


def test_the_compactor_keeps_the_head_and_every_pair_and_meets_its_bound() -> None:
    window = ContextWindow(4000, _count)
    conversation = _conversation(60)
    assert not pairing_problems(conversation)
    before = window.estimate(conversation)
    assert before > window.trigger
    newest = conversation[-2:]
    done = window.fit(conversation)
    assert done is not None
    assert done.tokens_before == before and done.tokens_after <= window.target
    assert done.results_shortened > 0 and done.turns_dropped > 0
    assert conversation[:2] == HEAD
    assert dropped_turns(conversation[2]) == done.turns_dropped
    assert conversation[-2:] == newest  # the newest turn stays whole
    assert not pairing_problems(conversation)
    assert _count(conversation) <= window.target
    # The results kept were shortened, the fenced ones still fenced as data.
    results = [
        m for m in conversation[3:-2] if m["role"] == "tool" or "<tool_result>" in m["content"]
    ]
    assert results and all("[compacted] ok: " in m["content"] for m in results)
    assert all(m["content"].startswith("TOOL RESULT") for m in results if m["role"] == "user")


def test_the_running_estimate_counts_only_new_messages_and_matches_a_recount() -> None:
    counted: list[int] = []

    def counting(messages: list[Message]) -> int:
        counted.append(len(messages))
        return _count(messages)

    window = ContextWindow(4000, counting)
    conversation = _conversation(60)
    window.fit(conversation)
    first_drop = dropped_turns(conversation[2])
    for i in range(60, 120):
        conversation += _turn(i)
        counted.clear()
        estimate = window.estimate(conversation)
        assert sum(counted) == 2  # the assistant message and its result, nothing before
        assert estimate == sum(_count([m]) for m in conversation)
        window.fit(conversation)
        assert window.estimate(conversation) <= window.trigger
        assert not pairing_problems(conversation)
    # One marker, after the head, counting every turn dropped so far.
    markers = [m for m in conversation if dropped_turns(m)]
    assert markers == [conversation[2]] and dropped_turns(conversation[2]) > first_drop
    assert "poll x" in conversation[2]["content"]


def test_below_the_trigger_nothing_changes_and_a_forced_fit_halves() -> None:
    window = ContextWindow(100_000, _count)
    conversation = _conversation(30)
    kept = list(conversation)
    assert window.fit(conversation) is None and conversation == kept
    done = window.fit(conversation, force=True)  # the provider said it overflowed
    assert done is not None and done.tokens_after <= done.tokens_before // 2
    assert conversation[:2] == HEAD and not pairing_problems(conversation)


def test_a_short_result_and_a_marker_are_not_shortened_again() -> None:
    result = tool_result_message("t1", {"ok": True, "data": {"log": "x" * 300}})
    short = shortened(result)
    assert short is not None and short["tool_call_id"] == "t1"
    assert shortened(short) is None
    assert shortened({"role": "user", "content": "PLAN\n1. poll"}) is None


async def _run_runaway(calls: int, window: int, monkeypatch: pytest.MonkeyPatch) -> None:
    bus = EventBus()
    recorder = Recorder()
    bus.subscribe(recorder)
    options = RunOptions(
        env=str(HARNESS),
        script="poll",
        approve="auto",
        budget_overrides={
            "max_turns": calls + 10,
            "max_tool_calls": calls,
            "max_tokens": 10**10,
            "max_cost": 10**6,
            "deadline": 3600,
        },
        settings=[f"model_profile.max_input_tokens={window}"],
    )
    prepared = prepare_run(options, bus=bus)
    problems: list[str] = []
    requests = 0
    play = scripted_provider.play

    def checked(script: Any, role: str, messages: list[Message], **kwargs: Any) -> Any:
        nonlocal requests
        if role == "executor":
            requests += 1
            tokens = prompt_tokens(messages, kwargs["tools"])
            if tokens >= window // 2:
                problems.append(f"request {requests}: a prompt of {tokens} tokens")
            if not messages[0]["content"].startswith(EXECUTOR_SYSTEM):
                problems.append(f"request {requests}: the system prompt is gone")
            if messages[1] != PLAN_MESSAGE:
                problems.append(f"request {requests}: the plan is gone: {messages[1]}")
            problems.extend(f"request {requests}: {p}" for p in pairing_problems(messages))
        return play(script, role=role, messages=messages, **kwargs)

    monkeypatch.setattr(scripted_provider, "play", checked)
    try:
        outcome = await prepared.runtime.run()
    finally:
        prepared.cleanup()
    assert outcome.tool_calls == calls, outcome.detail
    assert requests >= calls
    assert problems[:5] == []
    compactions = recorder.kinds("context_compacted")
    # Each compaction takes the prompt from past half the window to about a third of it.
    assert 0 < len(compactions) < calls / 5
    assert all(c.tokens_before - c.tokens_after >= window // 10 for c in compactions)
    started = recorder.kinds("run_started")[0]
    assert started.context_window == window and outcome.context_window == window
    assert outcome.compactions == len(compactions)


PLAN_MESSAGE = {"role": "user", "content": "PLAN\n1. Poll the job until it finishes."}


async def test_a_runaway_stays_inside_a_small_declared_window(monkeypatch) -> None:
    await _run_runaway(200, 3000, monkeypatch)


@pytest.mark.slow
async def test_a_5000_call_runaway_stays_inside_a_32k_window(monkeypatch) -> None:
    await _run_runaway(5000, 32000, monkeypatch)


async def test_a_small_window_compacts_and_keeps_the_task() -> None:
    prepared, rec = prepare(HARNESS, "poll", max_tool_calls=30, max_turns=100)
    runtime = prepared.runtime
    runtime.model.context_window = 1600
    sent = []
    complete = runtime.model.complete

    async def recording(request):
        sent.append([dict(m) for m in request.messages])
        return await complete(request)

    runtime.model.complete = recording
    outcome = await runtime.run()
    prepared.cleanup()
    compactions = rec.kinds("context_compacted")
    assert outcome.tool_calls == 30
    assert compactions
    assert all(c.tokens_after < c.tokens_before for c in compactions)
    executor_requests = [m for m in sent if m[0]["content"].startswith("You are the executor")]
    first, last = executor_requests[0], executor_requests[-1]
    assert last[:2] == first[:2]  # the system prompt and the plan survive every compaction
    assert any(str(m.get("content", "")).startswith("[compacted]") for m in last)
    assert all(runtime.model.count_tokens(m) <= 800 for m in executor_requests)


async def test_an_unknown_window_is_said_in_the_view_and_the_summary() -> None:
    prepared, rec = prepare(HARNESS, "note")
    try:
        outcome = await prepared.runtime.run()
    finally:
        prepared.cleanup()
    assert outcome.context_window is None and not rec.kinds("context_compacted")
    view = RunView()
    for event in rec.events:
        view.apply(event)
    assert view.context_note == "window unknown: no compaction"
    console = Console(record=True, width=200)
    print_summary(outcome, console)
    assert "context window unknown: no compaction" in console.export_text()


def test_the_view_says_what_compaction_did_in_a_known_window() -> None:
    from loopdeck.core.events import ContextCompacted, RunStarted

    view = RunView()
    start = {"env": "e", "script": None, "model": "m", "mode": "react", "goal": "g", "budget": {}}
    view.apply(RunStarted(run_id="r", context_window=32000, **start))
    assert view.context_note == ""
    compacted = {"round": 1, "tokens_before": 16100, "tokens_after": 11000, "reason": "past half"}
    event = ContextCompacted(run_id="r", results_shortened=40, turns_dropped=115, **compacted)
    view.apply(event)
    assert view.context_note == "compacted x1: 16,100→11,000 tokens (window 32,000)"
    entry = Transcript().apply(event)
    assert entry is not None and "16,100 → 11,000 tokens" in entry.title
    assert entry.body == "past half: 40 results shortened, 115 turns dropped"


async def test_a_nudge_after_a_repeat_in_a_reply_of_several_calls_keeps_the_pairs() -> None:
    """A reply's results follow it together; the operator's word comes after all of them."""
    from loopdeck.core.approvals import Answer, AutoApprover

    class Operator:
        async def answer(self, run_id: str, question_id: str, question: str) -> Answer:
            return Answer(text="nudge try another text", by="test")

    turns = (
        '[{calls = [{tool = "echo", args = {text = "a"}}]}, '
        '{calls = [{tool = "echo", args = {text = "a"}}, {tool = "echo", args = {text = "b"}}]}, '
        '{final = "done"}]'
    )
    options = RunOptions(
        env=str(HARNESS),
        script="twice",
        approve="auto",
        settings=[
            'scripts.twice.planner=["1. Echo a, then b."]',
            f"scripts.twice.executor={turns}",
        ],
    )
    prepared = prepare_run(options, approver=AutoApprover(), answerer=Operator())
    sent: list[list[Message]] = []
    complete = prepared.runtime.model.complete

    async def recording(request: Any) -> Any:
        if request.role == "executor":
            sent.append([dict(m) for m in request.messages])
        return await complete(request)

    prepared.runtime.model.complete = recording  # type: ignore[method-assign]
    try:
        outcome = await prepared.runtime.run()
    finally:
        prepared.cleanup()
    statuses = [c.status.value for c in outcome.calls]
    assert statuses == ["executed", "blocked_repeat", "executed"], outcome.detail
    last = sent[-1]
    assert last[-1] == {"role": "user", "content": "The operator says: try another text"}
    assert [pairing_problems(request) for request in sent] == [[]] * len(sent)
