"""Failures said in a line that names them: an unreadable env, a reply nested past Python's
limit, a pasted page as a run id, a budget's figures; and a scripted call cut short leaves no
coroutine behind."""

from __future__ import annotations

import asyncio
import gc
import os
import shutil
import warnings
from pathlib import Path

import pytest
from conftest import HARNESS, SAMPLES
from fake_openai import FakeOpenAI, raw_tool_call, text

from loopdeck.core.budgets import BudgetExhausted, Cap
from loopdeck.core.envdir import load_env_dir
from loopdeck.core.states import StopReason
from loopdeck.operator.launch import RunOptions, prepare_run


def test_an_unreadable_env_is_named_with_exit_2(tmp_path, cli, monkeypatch) -> None:
    env = tmp_path / "env"
    shutil.copytree(HARNESS, env)
    scenario = env / "scenario.toml"
    scenario.chmod(0)
    if os.geteuid() == 0:  # root reads it anyway: fail the read as it fails for a user
        read_text = Path.read_text

        def refused(self: Path, *args: object, **kwargs: object) -> str:
            if self == scenario:
                raise PermissionError(13, "Permission denied", str(self))
            return read_text(self, *args, **kwargs)  # type: ignore[arg-type]

        monkeypatch.setattr(Path, "read_text", refused)
    code, _, err = cli("run", str(env), "--script", "note", "--headless")
    assert code == 2
    assert f"{scenario}: cannot be read: Permission denied" in err and "Traceback" not in err


def test_a_set_value_nested_past_the_parser_is_named(cli) -> None:
    deep = "[" * 5000 + "]" * 5000
    code, _, err = cli("run", str(HARNESS), "--headless", "--set", f"data.notes={deep}")
    assert code == 2 and "Traceback" not in err
    assert "--set 'data.notes': the value is nested too deeply" in err and len(err) < 300


def test_a_scenario_nested_past_the_parser_is_named(tmp_path, cli) -> None:
    env = tmp_path / "deep"
    shutil.copytree(HARNESS, env)
    deep = "[" * 5000 + "]" * 5000
    (env / "scenario.toml").write_text(f'name = "deep"\ngoal = "x"\nvalue = {deep}\n')
    code, _, err = cli("run", str(env), "--headless")
    assert code == 2 and "nested too deeply" in err and "Traceback" not in err


async def test_a_reply_nested_5000_deep_stops_with_a_short_named_detail(monkeypatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-loopback")
    arguments = '{"replicas": ' + "[" * 5000 + "]" * 5000 + "}"
    with FakeOpenAI([text("1. Scale."), raw_tool_call("scale_service", arguments)]) as server:
        options = RunOptions(
            env=str(SAMPLES / "service_outage"),
            model="openai/gpt-4o-mini",
            api_base=server.url,
            approve="auto",
        )
        prepared = prepare_run(options)
        try:
            outcome = await prepared.runtime.run()
        finally:
            prepared.cleanup()
    assert outcome.stop_reason is StopReason.PROVIDER_FAILURE
    assert "the model's reply is nested deeper than about" in outcome.detail
    assert len(outcome.detail) < 200 and "Traceback" not in outcome.detail
    assert len(server.requests) == 2  # the planner's, and one executor's: not retried


def test_a_pasted_page_as_a_run_id_is_not_echoed_whole(tmp_path, cli) -> None:
    db = tmp_path / "s.db"
    cli("run", str(HARNESS), "--script", "note", "--json", "--db", str(db))
    page = "r" * 120_000
    for command in (["export", page], ["cancel", page], ["approve", page, "c1"]):
        code, _, err = cli(*command, "--db", str(db))
        assert code == 2 and "no run 'rrr" in err and "truncated 119900 chars" in err
        assert len(err) < 500


def test_a_budget_s_figures_are_whole_numbers_with_separators() -> None:
    assert str(BudgetExhausted(Cap.TOKENS, 2_621_570.0, 60_000)) == (
        "tokens budget exhausted: 2,621,570 of 60,000"
    )
    assert str(BudgetExhausted(Cap.COST, 1.000479, 1.0)).endswith(": 1.0005 of 1")


def test_a_scripted_reply_never_awaited_leaves_no_warning() -> None:
    """A deadline or a kill that cuts a scripted call while LiteLLM's pool makes the reply
    drops what the provider returned, unawaited."""
    import litellm

    from loopdeck.llm import scripted_provider

    handler = scripted_provider.handler_class()()
    key = scripted_provider.register_script(load_env_dir(HARNESS).script("note"))

    def call(script_key: str) -> object:
        return handler.acompletion(
            model="planner",
            messages=[{"role": "user", "content": "go"}],
            model_response=litellm.ModelResponse(),
            litellm_params={"metadata": {"loopdeck_script": script_key}},
        )

    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            call(key)
            call("no-such-script")
            gc.collect()
        assert [str(w.message) for w in caught if w.category is RuntimeWarning] == []
        reply, failing = call(key), call("no-such-script")
        assert asyncio.iscoroutine(reply) and asyncio.iscoroutine(failing)
        message = asyncio.run(_awaited(reply)).choices[0].message  # type: ignore[attr-defined]
        assert message.tool_calls[0].function.name == "write_note"
        with pytest.raises(Exception, match="without a registered script"):
            asyncio.run(_awaited(failing))
    finally:
        scripted_provider.release_script(key)


async def _awaited(awaitable: object) -> object:
    return await awaitable  # type: ignore[misc]
