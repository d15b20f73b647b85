"""Decisions from model output, provider failures, invalid output, token and cost accounting."""

import pytest
from conftest import SAMPLES, prepare

from loopdeck.core.decisions import InvalidDecision, read_decision
from loopdeck.core.model import ModelReply, ProviderError, RawToolCall
from loopdeck.core.states import StopReason


def _tools():
    prepared, _ = prepare(SAMPLES / "order_support", "solve")
    prepared.cleanup()
    return prepared.runtime.tools


def test_native_tool_call_becomes_a_decision() -> None:
    reply = ModelReply(
        model="m",
        content="Step 2: checking",
        tool_calls=[RawToolCall(id="x", name="get_order", arguments='{"order_id": "ORD-1"}')],
    )
    decision = read_decision(reply, _tools())
    assert decision.type == "tool_call" and decision.via == "native"
    assert decision.calls[0].args == {"order_id": "ORD-1"} and decision.plan_step == 2


@pytest.mark.parametrize(
    ("reply", "message"),
    [
        (ModelReply(model="m", content="sure, will do"), "not a valid decision"),
        (ModelReply(model="m", content='{"type": "shout", "reason_code": "X"}'), "type"),
        (
            ModelReply(model="m", tool_calls=[RawToolCall(id="x", name="refund", arguments="{}")]),
            "unknown tool 'refund'",
        ),
        (
            ModelReply(
                model="m", tool_calls=[RawToolCall(id="x", name="get_order", arguments="{oops")]
            ),
            "not valid JSON",
        ),
        (
            ModelReply(
                model="m",
                tool_calls=[
                    RawToolCall(id="x", name="get_order", arguments='{"order_id": "nope"}')
                ],
            ),
            "order_id",
        ),
    ],
)
def test_invalid_output_names_the_problem(reply, message) -> None:
    with pytest.raises(InvalidDecision, match=message):
        read_decision(reply, _tools())


def test_envelope_decisions() -> None:
    tools = _tools()
    final = read_decision(
        ModelReply(model="m", content='{"type":"final","message":"ok","reason_code":"D"}'), tools
    )
    assert final.type == "final" and final.message == "ok"
    envelope = (
        '{"type":"tool_call","tool_name":"get_order",'
        '"arguments":{"order_id":"ORD-7"},"reason_code":"R"}'
    )
    fenced = f"```json\n{envelope}\n```"
    call = read_decision(ModelReply(model="m", content=fenced), tools)
    assert call.calls[0].tool == "get_order" and call.via == "envelope"


async def test_garbage_output_ends_in_invalid_decision_after_the_corrections_budget() -> None:
    prepared, rec = prepare(SAMPLES / "service_outage", "garbage")
    outcome = await prepared.runtime.run()
    prepared.cleanup()
    assert outcome.stop_reason is StopReason.INVALID_DECISION
    assert [e.corrections_used for e in rec.kinds("decision_invalid")] == [1, 2, 3]


async def test_unknown_tool_is_corrected_within_budget() -> None:
    prepared, rec = prepare(SAMPLES / "order_support", "unknown-tool")
    outcome = await prepared.runtime.run()
    prepared.cleanup()
    assert outcome.stop_reason is StopReason.GOAL_MET
    assert "refund_order" in rec.kinds("decision_invalid")[0].error


class FailingModel:
    name = "failing"

    def __init__(self, error):
        self.error = error
        self.calls = 0

    async def complete(self, request):
        self.calls += 1
        raise self.error


@pytest.mark.parametrize(("retryable", "calls"), [(False, 1), (True, 4)])
async def test_provider_failure_after_classified_retries(retryable, calls) -> None:
    prepared, rec = prepare(SAMPLES / "service_outage", "solve")
    runtime = prepared.runtime
    runtime.model = FailingModel(ProviderError("HTTP 503 upstream", retryable=retryable))
    runtime.config = runtime.config.model_copy(update={"model_backoff_s": 0.001})
    outcome = await runtime.run()
    prepared.cleanup()
    assert outcome.stop_reason is StopReason.PROVIDER_FAILURE
    assert "HTTP 503" in outcome.detail
    assert runtime.model.calls == calls
    assert len(rec.kinds("model_retry")) == calls - 1


async def test_tokens_and_cost_are_summed_from_every_call() -> None:
    prepared, rec = prepare(SAMPLES / "service_outage", "solve")
    outcome = await prepared.runtime.run()
    prepared.cleanup()
    calls = rec.kinds("model_called")
    assert outcome.tokens == sum(c.prompt_tokens + c.completion_tokens for c in calls)
    assert outcome.cost_usd == pytest.approx(sum(c.cost_usd for c in calls))
    price = prepared.env_dir.scenario.scripted_price
    first = calls[0]
    expected = (
        first.prompt_tokens * price.input_per_million
        + first.completion_tokens * price.output_per_million
    ) / 1e6
    assert first.cost_usd == pytest.approx(expected)


async def test_unknown_price_is_unknown_not_zero() -> None:
    from loopdeck.core.model import ModelReply as Reply

    class NoPrice:
        name = "no-price"

        def __init__(self, inner):
            self.inner = inner

        async def complete(self, request):
            reply = await self.inner.complete(request)
            return Reply(**{**reply.model_dump(), "cost_usd": None})

    prepared, _ = prepare(SAMPLES / "service_outage", "solve")
    prepared.runtime.model = NoPrice(prepared.runtime.model)
    outcome = await prepared.runtime.run()
    prepared.cleanup()
    assert outcome.cost_usd is None and outcome.cost_unknown_calls == outcome.model_calls
