"""A model whose replies carry no `usage` (a loopback server speaking OpenAI's chat
completions without it): its tokens are unknown, never 0, in the panel, the summary and
`--json`; and a reply with no tokens has no price either."""

from __future__ import annotations

from conftest import SAMPLES
from console_helpers import finished, run_screen, wait_until
from fake_openai import FakeOpenAI, Reply, text, tool_call

from loopdeck.core.approvals import AutoApprover
from loopdeck.llm.client import reported_tokens
from loopdeck.llm.loader import litellm_module
from loopdeck.operator.approval_queue import ApprovalQueue
from loopdeck.operator.launch import RunOptions, prepare_run
from loopdeck.operator.session import RunSession
from loopdeck.tui.app import ConsoleStart, LoopdeckApp
from loopdeck.tui.panels import BudgetPanel

MODEL = "openai/gpt-4o-mini"
OUTAGE = SAMPLES / "service_outage"


def _without_usage(reply: Reply) -> Reply:
    reply.body.pop("usage")
    return reply


def _replies() -> list[Reply]:
    """A plan, then a call, with no usage: the run stops at its turn cap."""
    return [
        _without_usage(text("1. Scale the service.")),
        _without_usage(tool_call("scale_service", {"replicas": 3})),
    ]


async def test_litellm_reads_a_reply_without_usage_as_no_tokens_said(monkeypatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-loopback")
    litellm = litellm_module()
    ask = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}
    with FakeOpenAI([_without_usage(text("hello")), text("hello", usage=(100, 20))]) as server:
        silent = await litellm.acompletion(api_base=server.url, **ask)
        counted = await litellm.acompletion(api_base=server.url, **ask)
    assert reported_tokens(silent) is None  # LiteLLM filled it with zeros: nothing said
    assert reported_tokens(counted) == (100, 20)
    assert reported_tokens(silent, scripted=True) == (0, 0)  # a script's zeros are its own


def _options(url: str) -> RunOptions:
    return RunOptions(
        env=str(OUTAGE), model=MODEL, api_base=url, approve="auto",
        budget_overrides={"max_turns": 2}, run_id="run0unknown1",
    )  # fmt: skip


async def test_a_run_without_usage_has_its_cost_unknown(monkeypatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-loopback")
    with FakeOpenAI(_replies()) as server:
        prepared = prepare_run(_options(server.url), approver=AutoApprover())
        try:
            outcome = await prepared.runtime.run()
        finally:
            prepared.cleanup()
    assert outcome.model_calls == 2
    assert outcome.cost_usd is None and outcome.cost_unknown_calls == 2
    assert outcome.summary_json()["budget"]["cost_usd"]["used"] is None


def test_json_says_tokens_unknown(cli, monkeypatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-loopback")
    flags = ("--model", MODEL, "--headless", "--approve", "auto", "--max-turns", "2")
    with FakeOpenAI(_replies()) as server:
        code, out, _ = cli("run", str(OUTAGE), "--api-base", server.url, *flags, "--json")
    assert code == 1 and out is not None and out["model_calls"] == 2
    assert out["tokens"] is None and out["budget"]["tokens"]["used"] is None
    run_id = out["run_id"]
    code, listed, _ = cli("runs", "--json")  # the store's row says it too
    assert code == 0 and isinstance(listed, list)
    [row] = [r for r in listed if r["run_id"] == run_id]
    assert row["tokens"] is None and row["cost_usd"] is None


def test_the_summary_line_says_tokens_unknown(capsys, monkeypatch) -> None:
    from loopdeck.cli import main

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-loopback")
    with FakeOpenAI(_replies()) as server:
        main(["run", str(OUTAGE), "--api-base", server.url, "--model", MODEL, "--headless",
              "--approve", "auto", "--max-turns", "2"])  # fmt: skip
    out = capsys.readouterr().out
    assert "tokens unknown ·" in out and "cost unknown ·" in out


async def test_the_budget_panel_says_tokens_unknown(monkeypatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-loopback")
    with FakeOpenAI(_replies()) as server:
        queue = ApprovalQueue()
        prepared = prepare_run(_options(server.url), approver=AutoApprover())
        app = LoopdeckApp(ConsoleStart.for_run(RunSession.adopted(prepared, queue)))
        async with app.run_test(size=(160, 48)) as pilot:
            await wait_until(pilot, lambda: finished(app))
            screen = run_screen(app)
            assert screen is not None
            panel = screen.query_one(BudgetPanel)
            rows = lambda: {r.split()[0]: r for r in str(panel.render()).splitlines() if r}  # noqa: E731
            await wait_until(pilot, lambda: "2/2" in rows().get("turns", ""))
            assert "unknown" in rows()["tokens"] and "unknown" in rows()["cost"]
