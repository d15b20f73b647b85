"""What issue 11's optimisations rely on, checked as behaviour (bench/ has the timings)."""

from __future__ import annotations

import json
import os
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from rich.text import Text
from textual.app import App, ComposeResult

from loopdeck.core.events import CallStatus
from loopdeck.core.model import ModelRequest
from loopdeck.core.scenario import Script, ScriptedPrice, ScriptTurn
from loopdeck.llm.client import LiteLLMModel
from loopdeck.llm.loader import litellm_module
from loopdeck.llm.script_player import count_tokens, prompt_text, prompt_tokens
from loopdeck.operator.runview import CallRow, RunView
from loopdeck.tui.calls_table import CallsTable

text = st.text(max_size=40)
call = st.fixed_dictionaries(
    {
        "id": text,
        "type": st.just("function"),
        "function": st.fixed_dictionaries({"name": text, "arguments": text}),
    }
)
odd_call = st.dictionaries(text, st.one_of(text, st.integers()), max_size=3)
message = st.fixed_dictionaries(
    {"role": st.sampled_from(["system", "user", "assistant", "tool"])},
    optional={
        "content": st.one_of(st.none(), text),
        "tool_calls": st.lists(st.one_of(call, odd_call), max_size=3),
    },
)


@settings(max_examples=300, deadline=None)
@given(st.lists(message, max_size=12), st.lists(st.just({"name": "t"}), max_size=2))
def test_the_scripted_token_count_is_the_same_figure_with_or_without_its_cache(
    messages: list[dict[str, Any]], tools: list[dict[str, Any]]
) -> None:
    expected = count_tokens(prompt_text(messages, tools))
    assert prompt_tokens(messages, tools) == expected
    assert prompt_tokens(messages, tools) == expected  # the second time from the cache


async def test_litellm_keeps_cost_and_usage_with_its_base64_log_walk_off() -> None:
    litellm_module()
    assert os.environ["MAX_BASE64_LENGTH_FOR_LOGGING"] == "0"
    price = ScriptedPrice(input_per_million=3.0, output_per_million=15.0)
    script = Script(executor=[ScriptTurn(tool="poll", args={"job": "j1"}, repeat=True)])
    model = LiteLLMModel("scripted", script=script, price=price)
    history: list[dict[str, Any]] = [{"role": "user", "content": "poll the job"}]
    for i in range(50):  # a long history: the path that used to walk every message
        call = {"id": f"c{i}", "type": "function", "function": {"name": "poll", "arguments": "{}"}}
        history += [
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"c{i}", "content": json.dumps({"i": i})},
        ]
    reply = await model.complete(ModelRequest(role="executor", round=1, messages=history))
    assert reply.tool_calls[0].name == "poll"
    assert reply.prompt_tokens == count_tokens(prompt_text(history, []))
    expected = (reply.prompt_tokens * 3.0 + reply.completion_tokens * 15.0) / 1e6
    assert reply.cost_usd is not None and abs(reply.cost_usd - expected) < 1e-12


class TableApp(App[None]):
    def compose(self) -> ComposeResult:
        yield CallsTable()


async def test_calls_table_cells_are_plain_text_never_markup() -> None:
    view = RunView()
    row = CallRow(
        call_id="c1", round=1, tool="[b]poll[/b]", args={"q": "[red]x[/red]"}, risk="read",
        fingerprint="f" * 12, state_hash="s" * 12, status=CallStatus.EXECUTED, duration_ms=12.0,
    )  # fmt: skip
    view.calls["c1"] = row
    view.changed_calls.add("c1")
    app = TableApp()
    async with app.run_test(size=(160, 20)) as pilot:
        table = app.query_one(CallsTable)
        table.sync(view)
        await pilot.pause()
        cells = table.get_row("c1")
        assert all(isinstance(cell, Text) for cell in cells)
        shown = " ".join(cell.plain for cell in cells)
        assert "[b]poll[/b]" in shown and "[red]x[/red]" in shown
