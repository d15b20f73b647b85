"""Real-model paths through LiteLLM against a loopback OpenAI-compatible server."""

import json
import subprocess
import sys

import pytest
from conftest import SAMPLES
from fake_openai import FakeOpenAI, envelope, error, raw_tool_call, text, tool_call

from loopdeck.core.states import StopReason
from loopdeck.operator.launch import RunOptions, prepare_run

PLAN = text("1. Read the status.\n2. Fix db_url.\n3. Scale to 3.", usage=(50, 10))
SOLVE = [
    PLAN,
    tool_call("get_status", {}, "call_a"),
    tool_call(
        "set_config", {"key": "db_url", "value": "postgres://orders-db-v2:5432/orders"}, "call_b"
    ),
    tool_call("scale_service", {"replicas": 3}, "call_c"),
    envelope(type="final", message="fixed", reason_code="DONE"),
]


@pytest.fixture(autouse=True)
def _key(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-loopback")


async def _run(server, model="openai/gpt-4o-mini", script_env="service_outage", **budget):
    options = RunOptions(
        env=str(SAMPLES / script_env),
        model=model,
        api_base=server.url,
        approve="auto",
        budget_overrides=budget,
    )
    prepared = prepare_run(options)
    prepared.runtime.config = prepared.runtime.config.model_copy(update={"model_backoff_s": 0.01})
    events = []
    prepared.runtime.bus.subscribe(events.append)
    try:
        outcome = await prepared.runtime.run()
    finally:
        prepared.cleanup()
    return outcome, events


async def test_full_run_with_native_tool_calls() -> None:
    with FakeOpenAI(SOLVE) as server:
        outcome, events = await _run(server)
    assert outcome.stop_reason is StopReason.GOAL_MET
    assert [c.tool for c in outcome.calls] == ["get_status", "set_config", "scale_service"]
    executor_request = server.requests[1]
    assert {t["function"]["name"] for t in executor_request["tools"]} >= {
        "get_status",
        "set_config",
    }
    headers = {k.lower(): v for k, v in server.headers[0].items()}
    assert headers["authorization"] == "Bearer sk-test-loopback"
    # tokens are the server's usage, call by call
    called = [e for e in events if e.kind == "model_called"]
    # the goal check after scale_service passes: the run stops before the final turn
    assert [(e.prompt_tokens, e.completion_tokens) for e in called] == [(50, 10)] + [(100, 20)] * 3
    assert outcome.tokens == 60 + 3 * 120
    assert outcome.cost_usd is not None and outcome.cost_usd > 0  # gpt-4o-mini has a known price
    # tool results went back as tool messages bound to their call ids
    tool_messages = [m for m in server.requests[2]["messages"] if m["role"] == "tool"]
    assert tool_messages[0]["tool_call_id"] == "call_a"


async def test_json_envelope_path_for_a_model_without_tool_calling() -> None:
    replies = [
        PLAN,
        envelope(type="tool_call", tool_name="get_status", arguments={}, reason_code="LOOK"),
        envelope(
            type="tool_call", tool_name="set_config", reason_code="FIX",
            arguments={"key": "db_url", "value": "postgres://orders-db-v2:5432/orders"},
        ),
        envelope(
            type="tool_call", tool_name="scale_service", arguments={"replicas": 3}, reason_code="S"
        ),
        envelope(type="final", message="fixed", reason_code="DONE"),
    ]  # fmt: skip
    with FakeOpenAI(replies) as server:
        outcome, _events = await _run(server, model="openai/local-model")
    assert outcome.stop_reason is StopReason.GOAL_MET
    executor_request = server.requests[1]
    assert "tools" not in executor_request
    assert "ALLOWED_TOOLS" in executor_request["messages"][0]["content"]
    assert all(m["role"] != "tool" for r in server.requests for m in r["messages"])
    assert outcome.cost_usd is None  # an unmapped model's price is unknown, never 0


async def test_rate_limit_is_retried_visibly_then_succeeds() -> None:
    with FakeOpenAI([error(429, "slow down"), *SOLVE]) as server:
        outcome, events = await _run(server)
    assert outcome.stop_reason is StopReason.GOAL_MET
    retries = [e for e in events if e.kind == "model_retry"]
    assert len(retries) == 1 and "RateLimit" in retries[0].error
    assert len(server.requests) == 5


async def test_server_errors_four_times_is_provider_failure() -> None:
    with FakeOpenAI([error(500, "boom")]) as server:
        outcome, events = await _run(server)
    assert outcome.stop_reason is StopReason.PROVIDER_FAILURE
    assert len(server.requests) == 4
    assert len([e for e in events if e.kind == "model_retry"]) == 3


async def test_unauthorized_stops_after_exactly_one_request() -> None:
    with FakeOpenAI([error(401, "invalid api key provided")]) as server:
        outcome, _ = await _run(server)
    assert outcome.stop_reason is StopReason.PROVIDER_FAILURE
    assert "invalid api key provided" in outcome.detail
    assert outcome.detail.count("AuthenticationError") == 1  # said once, not LiteLLM's three
    assert "litellm." not in outcome.detail
    assert len(server.requests) == 1


async def test_malformed_arguments_and_unknown_tools_are_corrected() -> None:
    replies = [
        PLAN,
        raw_tool_call("restart_everything", "{}"),
        raw_tool_call("scale_service", '{"replicas": "many"'),
        *SOLVE[1:],
    ]
    with FakeOpenAI(replies) as server:
        outcome, events = await _run(server)
    invalid = [e.error for e in events if e.kind == "decision_invalid"]
    assert "unknown tool 'restart_everything'" in invalid[0]
    assert "not valid JSON" in invalid[1]
    assert outcome.stop_reason is StopReason.GOAL_MET
    corrections = [m for m in server.requests[2]["messages"] if m["role"] == "tool"]
    assert "VALIDATION_ERROR" in corrections[0]["content"]


async def test_invalid_output_beyond_the_budget_is_invalid_decision() -> None:
    with FakeOpenAI([PLAN, text("I would rather chat.")]) as server:
        outcome, _ = await _run(server)
    assert outcome.stop_reason is StopReason.INVALID_DECISION
    assert len(server.requests) == 1 + 3


async def test_slow_server_hits_the_timeout() -> None:
    from fake_openai import Reply

    slow = Reply(status=200, body=PLAN.body, delay_s=2.0)
    with FakeOpenAI([slow]) as server:
        options = RunOptions(
            env=str(SAMPLES / "service_outage"), model="openai/gpt-4o-mini", api_base=server.url,
            approve="auto", model_timeout_s=0.3,
        )  # fmt: skip
        prepared = prepare_run(options)
        prepared.runtime.config = prepared.runtime.config.model_copy(
            update={"model_backoff_s": 0.01}
        )
        outcome = await prepared.runtime.run()
        prepared.cleanup()
    assert outcome.stop_reason is StopReason.PROVIDER_FAILURE
    assert "timed out" in outcome.detail.lower() or "timeout" in outcome.detail.lower()
    assert server.requests, "the slow server was reached; the timeout, not an error, ended it"


async def test_context_overflow_compacts_and_retries_once() -> None:
    overflow = error(
        400, "This model's maximum context length is 100 tokens", code="context_length_exceeded"
    )
    check_again = tool_call("get_status", {}, "call_a2")
    replies = [PLAN, *SOLVE[1:3], check_again, overflow, *SOLVE[3:]]
    with FakeOpenAI(replies) as server:
        outcome, events = await _run(server)
    compactions = [e for e in events if e.kind == "context_compacted"]
    assert outcome.stop_reason is StopReason.GOAL_MET
    assert compactions and compactions[0].tokens_after < compactions[0].tokens_before


@pytest.mark.slow
def test_cli_against_the_loopback_server(monkeypatch) -> None:
    with FakeOpenAI(SOLVE) as server:
        proc = subprocess.run(
            [sys.executable, "-m", "loopdeck", "run", str(SAMPLES / "service_outage"),
             "--model", "openai/gpt-4o-mini", "--api-base", server.url, "--headless", "--json",
             "--approve", "auto"],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert summary["stop_reason"] == "goal_met" and summary["model"] == "openai/gpt-4o-mini"


def test_missing_key_is_a_clear_error_before_the_run(monkeypatch, cli) -> None:
    monkeypatch.delenv("OPENAI_API_KEY")
    code, _, err = cli(
        "run", "service_outage", "--model", "openai/gpt-4o-mini", "--headless", "--approve", "auto"
    )
    assert code == 2 and "OPENAI_API_KEY" in err
