"""Model profiles from LiteLLM's map, scenario overrides, and layers a model cannot carry."""

import pytest
from conftest import SAMPLES

from loopdeck.core.model import ModelRequest
from loopdeck.llm.profile import UnsupportedLayer, profile_for
from loopdeck.llm.prompt_program import compile_request
from loopdeck.operator.runview import RunView

TOOLS = [{"type": "function", "function": {"name": "get_status", "parameters": {"type": "object"}}}]


def test_known_model_profile_comes_from_the_model_map() -> None:
    profile = profile_for("openai/gpt-4o-mini")
    assert profile.tool_calling and profile.known_price
    assert profile.max_input_tokens and profile.max_input_tokens > 10_000


def test_unknown_model_gets_the_envelope_unless_overridden() -> None:
    assert not profile_for("openai/my-vllm-model").tool_calling
    assert profile_for("openai/my-vllm-model", {"tool_calling": True}).tool_calling


def test_compiled_request_per_profile() -> None:
    request = ModelRequest(
        role="executor",
        round=1,
        messages=[{"role": "system", "content": "rules"}, {"role": "user", "content": "PLAN"}],
        tools=TOOLS,
    )
    native = compile_request(request, profile_for("openai/gpt-4o-mini"))
    system = native["messages"][0]["content"]
    assert native["tools"] == TOOLS and system.startswith("rules")
    assert "OUTPUT CONTRACT\nCall one of the tools natively" in system
    assert "ALLOWED_TOOLS" not in system
    plain = compile_request(request, profile_for("openai/my-vllm-model"))
    assert "tools" not in plain
    system = plain["messages"][0]["content"]
    assert "get_status" in system and "ALLOWED_TOOLS" in system
    assert "OUTPUT CONTRACT\nReply with exactly one JSON object" in system
    assert plain["messages"][1] == request.messages[1]  # context and task layers untouched


def test_examples_are_their_own_layer() -> None:
    request = ModelRequest(
        role="executor",
        round=1,
        messages=[{"role": "system", "content": "rules"}],
        tools=TOOLS,
        examples=['{"type": "tool_call", "tool_name": "get_status", "reason_code": "LOOK"}'],
    )
    system = compile_request(request, profile_for("openai/gpt-4o-mini"))["messages"][0]["content"]
    assert system.index("EXAMPLES") < system.index("OUTPUT CONTRACT")
    assert '"tool_name": "get_status"' in system


def test_a_layer_the_model_cannot_carry_is_named_before_any_request() -> None:
    profile = profile_for("openai/my-vllm-model", {"temperature": False})
    request = ModelRequest(role="executor", round=1, messages=[])
    with pytest.raises(UnsupportedLayer, match="temperature"):
        compile_request(request, profile, temperature=0.2)


def test_cli_names_the_layer_from_the_scenario(cli, tmp_path) -> None:
    env = tmp_path / "warm"
    env.mkdir()
    scenario = (SAMPLES / "service_outage" / "scenario.toml").read_text()
    scenario = scenario.replace(
        "approval_ttl_s = 300",
        "approval_ttl_s = 300\ntemperature = 0.2\nmodel_profile = { temperature = false }",
    )
    (env / "scenario.toml").write_text(scenario)
    (env / "env.py").write_text((SAMPLES / "service_outage" / "env.py").read_text())
    code, _, err = cli("run", str(env), "--headless")
    assert code == 2
    assert "temperature" in err and "scenario.toml" in err


def test_retries_and_compactions_reach_the_operators_view() -> None:
    from loopdeck.core.events import ContextCompacted, ModelRetry

    view = RunView()
    view.apply(ModelRetry(run_id="r", attempt=1, error="RateLimitError: slow down", delay_s=0.5))
    view.apply(
        ContextCompacted(run_id="r", round=1, tokens_before=900, tokens_after=400, reason="x")
    )
    assert view.model_retries == 1 and "RateLimit" in view.last_model_error
    assert view.last_compaction == (900, 400)


@pytest.mark.parametrize(
    ("model", "window"),
    [
        ("openai/gpt-4o-mini", 128_000),  # get_model_info knows it
        ("azure/mistral-large-latest", 32_000),  # in the map, under the name as given
        ("bedrock_converse/writer.palmyra-x4-v1:0", 128_000),  # the map's, without the prefix
    ],
)
def test_a_model_litellm_knows_gets_its_window_without_the_scenario_saying_it(
    model: str, window: int
) -> None:
    from loopdeck.llm.client import LiteLLMModel

    assert profile_for(model).max_input_tokens == window
    assert LiteLLMModel(model).context_window == window  # compaction keeps the run inside it
    assert profile_for(model, {"max_input_tokens": 9_000}).max_input_tokens == 9_000


def test_a_model_nobody_knows_has_no_window() -> None:
    assert profile_for("openai/my-vllm-model").max_input_tokens is None
    # a bare name under another provider's entry is not taken for it
    assert profile_for("ai21x/jamba-1.5-mini").max_input_tokens is None
