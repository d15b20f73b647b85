"""What an answer spent, in each of the three formats: its prompt's tokens (what was read from a
cache or written to one included) apart from its completion's, and its cost priced by LiteLLM
from that same split (the completion's tokens at the output price, the cache's at its own)."""

from __future__ import annotations

from typing import Any

import pytest

from loopdeck.gateway.answer import Usage
from loopdeck.gateway.server import FORMATS
from loopdeck.gateway.upstream import Upstream
from loopdeck.llm.loader import litellm_module

CHAT = {"prompt_tokens": 120, "completion_tokens": 30, "total_tokens": 150,
        "prompt_tokens_details": {"cached_tokens": 100}}  # fmt: skip
RESPONSES = {"input_tokens": 120, "input_tokens_details": {"cached_tokens": 100},
             "output_tokens": 30, "total_tokens": 150}  # fmt: skip
MESSAGES = {"input_tokens": 120, "cache_creation_input_tokens": 50,
            "cache_read_input_tokens": 1000, "output_tokens": 30}  # fmt: skip


@pytest.mark.parametrize(
    ("api", "usage", "split"),
    [
        ("chat", CHAT, Usage(120, 30)),
        ("chat", {"total_tokens": 150, "completion_tokens": 30}, Usage(120, 30)),
        ("chat", {"total_tokens": 150}, Usage(150, 0)),  # no split said: all the prompt's
        ("responses", RESPONSES, Usage(120, 30)),
        ("responses", {"input_tokens": 120, "total_tokens": 150}, Usage(120, 30)),
        ("messages", MESSAGES, Usage(120 + 50 + 1000, 30)),
        ("messages", {"input_tokens": 120, "output_tokens": 30}, Usage(120, 30)),
        ("messages", {"output_tokens": 30}, Usage(0, 30)),
    ],
)
def test_each_format_splits_prompt_from_completion(
    api: str, usage: dict[str, Any], split: Usage
) -> None:
    assert FORMATS[api].usage({"usage": usage}) == split


@pytest.mark.parametrize("api", ["chat", "responses", "messages"])
def test_an_answer_without_usage_spent_an_unknown_amount(api: str) -> None:
    assert FORMATS[api].usage({}) is None
    assert FORMATS[api].usage({"usage": {"input_tokens": None}}) is None


def _price(model: str) -> dict[str, float]:
    return dict(litellm_module().model_cost[model])


def test_a_chat_answer_is_priced_by_its_split() -> None:
    price = _price("gpt-4o")
    answer = {"object": "chat.completion", "model": "gpt-4o", "choices": [], "usage": CHAT}
    expected = (
        20 * price["input_cost_per_token"]
        + 100 * price["cache_read_input_token_cost"]
        + 30 * price["output_cost_per_token"]
    )
    assert Upstream("openai/gpt-4o", None, 60.0).cost(answer) == pytest.approx(expected)


def test_a_responses_answer_is_priced_by_its_split() -> None:
    price = _price("gpt-4o")
    answer = {"object": "response", "model": "gpt-4o", "output": [], "usage": RESPONSES}
    expected = (
        20 * price["input_cost_per_token"]
        + 100 * price["cache_read_input_token_cost"]
        + 30 * price["output_cost_per_token"]
    )
    assert Upstream("openai/gpt-4o", None, 60.0).cost(answer) == pytest.approx(expected)


def test_a_messages_answer_is_priced_by_its_split() -> None:
    price = _price("claude-sonnet-4-5")
    answer = {"type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
              "content": [{"type": "text", "text": "hi"}], "usage": MESSAGES}  # fmt: skip
    expected = (
        120 * price["input_cost_per_token"]
        + 50 * price["cache_creation_input_token_cost"]
        + 1000 * price["cache_read_input_token_cost"]
        + 30 * price["output_cost_per_token"]
    )
    upstream = Upstream("anthropic/claude-sonnet-4-5", None, 60.0)
    assert upstream.cost(answer) == pytest.approx(expected)
