"""Context management: the system prompt and the task are pinned; old turns get shorter."""

import json

from conftest import HARNESS, prepare

from loopdeck.core.compaction import compact, needs_compaction


def _turn(i: int, ok: bool = True) -> list[dict]:
    call = {"id": f"t{i}", "type": "function", "function": {"name": "poll", "arguments": "{}"}}
    payload = {"ok": ok, "data": {"log": "x" * 400} if ok else None}
    if not ok:
        payload["error"] = {"code": "TIMEOUT", "message": "poll timed out"}
    return [
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": f"t{i}", "content": json.dumps({"tool_result": payload})},
    ]


def test_compaction_pins_the_head_and_shortens_the_oldest_third() -> None:
    head = [{"role": "system", "content": "rules"}, {"role": "user", "content": "PLAN\n1. poll"}]
    turns = [m for i in range(6) for m in _turn(i, ok=i != 1)]
    compacted = compact(head + turns)
    assert compacted[:2] == head
    assert len(compacted) == len(head) + len(turns)  # decisions are kept, results shortened
    assert compacted[2] == turns[0]  # the decision itself stays verbatim
    assert (
        compacted[3]["content"].startswith("[compacted] ok:") and len(compacted[3]["content"]) < 130
    )
    assert compacted[5]["content"] == "[compacted] failed (TIMEOUT): poll timed out"
    assert compacted[6:] == turns[4:]


def test_needs_compaction_at_half_the_window() -> None:
    assert not needs_compaction(500, 1000)
    assert needs_compaction(501, 1000)
    assert not needs_compaction(10**9, None)


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
    assert runtime.model.count_tokens(last) <= 1600
