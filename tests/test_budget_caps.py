"""One typed cap: each `Cap` carries every fact of its cap, the budget event is read as one
usage type whose unknown is None, and a log written in the earlier form reads the same."""

from __future__ import annotations

import argparse
import json

import pytest
from textual.app import App, ComposeResult
from textual.geometry import Region

from loopdeck.caps import FLAGGED_CAPS, Cap
from loopdeck.cli.parser import add_budget_flags, budget_overrides
from loopdeck.core.budgets import (
    CAP_STOP_REASON,
    Budget,
    BudgetExhausted,
    BudgetLedger,
    CapUsage,
)
from loopdeck.core.events import EVENT_ADAPTER, BudgetUpdated
from loopdeck.core.outcome import RunOutcome
from loopdeck.core.states import RunState, StopReason
from loopdeck.operator.launch import BUDGET_FLAGS
from loopdeck.operator.otel_attributes import stop_attributes
from loopdeck.operator.runview import RunView
from loopdeck.tui.panels import BudgetPanel

# A budget event as the code before `unreported` wrote it: unknown said by a count and a flag.
EARLIER_FORM = {
    "kind": "budget_updated", "run_id": "r1", "seq": 7, "at": "2026-12-01T10:00:00Z",
    "usage": {"turns": [3, 40], "tool_calls": [2, 60], "tokens": [1200, 200000],
              "cost_usd": [0.0, 1.0], "deadline_s": [12.5, 300.0], "rounds": [1, 4],
              "corrections": [0, 2]},
    "cost_unknown_calls": 3, "tokens_unknown": True, "operator_s": 1.5, "held": None,
}  # fmt: skip


def test_every_cap_has_every_fact() -> None:
    ledger = BudgetLedger(Budget())
    for cap in Cap:
        assert cap.limit_field in Budget.model_fields, cap
        annotation = Budget.model_fields[cap.limit_field].annotation
        assert cap.whole == (annotation is int), f"{cap}: whole, yet its limit is {annotation}"
        assert cap is Cap.DEADLINE or hasattr(ledger, cap.used_field), cap
        assert cap.label and cap.label == cap.label.strip(), cap
        assert cap.short_label.startswith(cap.label), cap
        assert CAP_STOP_REASON[cap] is StopReason(cap.stops_as)
        assert Cap.named(cap.value) is cap
        if cap.flag:
            assert cap.flag.startswith("--") and cap.metavar, cap
            assert cap.option == cap.flag[2:].replace("-", "_")
    assert Cap.named("a cap no one has") is None
    # Burnt caps pause a run and rank the fleet; counted ones do neither.
    assert {cap for cap in Cap if not cap.burnt} == {Cap.ROUNDS, Cap.CORRECTIONS}
    # Each flag's name as stored runs' options and gateway tokens keep it, and its field.
    assert BUDGET_FLAGS == {
        "max_turns": "max_turns", "max_tool_calls": "max_tool_calls",
        "max_tokens": "max_tokens", "max_cost": "max_cost_usd", "deadline": "deadline_s",
        "max_rounds": "max_rounds",
    }  # fmt: skip
    assert Cap.CORRECTIONS not in FLAGGED_CAPS


def test_the_budget_flags_are_the_caps_flags_with_their_types() -> None:
    parser = argparse.ArgumentParser()
    add_budget_flags(parser)
    args = parser.parse_args(["--max-turns", "3", "--max-cost", "0.5", "--deadline", "9.5"])
    assert budget_overrides(args) == {
        "max_turns": 3, "max_tool_calls": None, "max_tokens": None, "max_cost": 0.5,
        "deadline": 9.5, "max_rounds": None,
    }  # fmt: skip
    with pytest.raises(SystemExit):
        parser.parse_args(["--max-tokens", "1.5"])  # a count is whole
    assert "USD" in parser.format_help() and "SECONDS" in parser.format_help()


def test_a_reply_without_usage_leaves_tokens_unknown_and_the_cap_checks_what_was_said() -> None:
    ledger = BudgetLedger(Budget(max_tokens=1000))
    ledger.record_model_call(tokens=400, cost_usd=0.01)
    assert ledger.caps()[Cap.TOKENS] == CapUsage(400.0, 1000.0, 400.0)
    ledger.record_model_call(tokens=None, cost_usd=None)  # a reply that said nothing
    tokens, cost = ledger.caps()[Cap.TOKENS], ledger.caps()[Cap.COST]
    assert tokens.used is None and tokens.reported == 400 and not tokens.known
    assert cost.used is None and cost.reported == 0.01
    assert tokens.amount(Cap.TOKENS) == "unknown"
    assert tokens.spent(Cap.TOKENS) == "unknown (≥400 reported)"
    # Unknown from then on, whatever is reported after it.
    ledger.record_model_call(tokens=700, cost_usd=0.01)
    assert ledger.caps()[Cap.TOKENS].used is None
    # The cap still stops a run known to be past it: what was reported is a lower bound.
    with pytest.raises(BudgetExhausted) as stop:
        ledger.after_model_call()
    assert stop.value.stop_reason is StopReason.TOKEN_LIMIT


def test_an_event_in_the_earlier_form_loads_and_reads_the_same() -> None:
    event = EVENT_ADAPTER.validate_json(json.dumps(EARLIER_FORM))
    assert isinstance(event, BudgetUpdated)
    assert event.tokens_unknown and event.cost_unknown_calls == 3  # as the earlier readers had
    caps = event.caps()
    assert list(caps) == list(Cap)
    assert caps[Cap.TOKENS] == CapUsage(None, 200000.0, 1200.0)
    assert caps[Cap.COST] == CapUsage(None, 1.0, 0.0)
    assert caps[Cap.TURNS] == CapUsage(3.0, 40.0, 3.0)
    assert event.usage["deadline_s"] == (12.5, 300.0)  # what a replay's clock reads
    # Written again, it is in the one form, and reads back the same.
    again = EVENT_ADAPTER.validate_json(event.model_dump_json())
    assert again == event and "tokens_unknown" not in event.model_dump()
    assert event.model_dump()["unreported"] == {"cost_usd": 3, "tokens": 1}


def test_the_earlier_constructor_form_still_makes_the_event() -> None:
    made = BudgetUpdated(run_id="r", usage={"tokens": (5.0, 10.0)}, cost_unknown_calls=0)  # type: ignore[call-arg]
    assert made.unreported == {} and not made.tokens_unknown
    assert made.caps() == {Cap.TOKENS: CapUsage(5.0, 10.0, 5.0)}


def test_otel_leaves_an_unknown_use_out_and_says_what_was_reported() -> None:
    event = EVENT_ADAPTER.validate_json(json.dumps(EARLIER_FORM))
    assert isinstance(event, BudgetUpdated)
    said = dict(stop_attributes(None, event, content=False))
    assert "loopdeck.budget.tokens.used" not in said
    assert said["loopdeck.budget.tokens.reported"] == 1200.0
    assert said["loopdeck.budget.tokens.limit"] == 200000.0
    assert said["loopdeck.budget.turns.used"] == 3.0
    assert said["loopdeck.cost_unknown_calls"] == 3


def test_the_summary_says_unknown_with_what_was_reported() -> None:
    from io import StringIO

    from rich.console import Console

    from loopdeck.cli.summary import print_summary

    budget = {Cap.TOKENS: CapUsage(None, 1000.0, 400.0), Cap.COST: CapUsage(None, 1.0, 0.0)}
    outcome = RunOutcome(
        run_id="r", env="e", script=None, model="m", mode="m", state=RunState.STOPPED,
        stop_reason=StopReason.TURN_LIMIT, detail="", rounds=1, model_calls=2, tool_calls=0,
        tokens=None, cost_usd=None, cost_unknown_calls=1, elapsed_s=1.0, findings=[],
        budget=budget,
    )  # fmt: skip
    out = StringIO()
    print_summary(outcome, Console(file=out, width=200))
    assert "tokens unknown (≥400 reported)" in out.getvalue()
    assert "cost unknown ·" in out.getvalue()
    data = outcome.summary_json()
    assert data["tokens"] is None and data["cost_usd"] is None
    assert data["budget"]["tokens"] == {"used": None, "limit": 1000.0, "reported": 400.0}


class _PanelApp(App[None]):
    def compose(self) -> ComposeResult:
        yield BudgetPanel()


async def test_the_panel_shows_an_earlier_logs_unknown_tokens_and_cost() -> None:
    view = RunView(run_id="r1", env="e", script="s", model="m", goal="g")
    view.apply(EVENT_ADAPTER.validate_json(json.dumps(EARLIER_FORM)))
    app = _PanelApp()
    async with app.run_test(size=(80, 12)) as pilot:
        panel = app.query_one(BudgetPanel)
        panel.show(view, 12.0)
        await pilot.pause()
        lines = {line.split()[0]: line for line in str(panel.render()).splitlines()}
    assert "unknown" in lines["tokens"] and "1,200" not in lines["tokens"]
    assert "unknown" in lines["cost"]
    assert "3/40" in lines["turns"] and "12/300" in lines["time"]


class _NarrowPanelApp(App[None]):
    CSS = "BudgetPanel { width: 32; }"  # the budgets panel at 80x24

    def compose(self) -> ComposeResult:
        yield BudgetPanel()


@pytest.mark.parametrize(("app_class", "said"), [(_PanelApp, True), (_NarrowPanelApp, False)])
async def test_the_operators_wait_is_one_line_that_fits_the_panel(
    app_class: type[App[None]], said: bool
) -> None:
    """ "not charged" beside the wait where it fits; never wrapped onto a line of its own (the
    panel's height would hide it, cut after "not")."""
    view = RunView(run_id="r1", env="e", script="s", model="m", goal="g")
    view.apply(EVENT_ADAPTER.validate_json(json.dumps(EARLIER_FORM)))
    app = app_class()
    async with app.run_test(size=(80, 14)) as pilot:
        panel = app.query_one(BudgetPanel)
        panel.show(view, 12.0, operator_s=5.0)
        await pilot.pause()
        width, height = panel.size
        text = [strip.text.rstrip() for strip in panel.render_lines(Region(0, 0, width, height))]
    [waiting] = [line for line in text if "waiting on you" in line]
    assert waiting.strip().startswith("waiting on you 0:00:05")
    assert waiting.endswith("not charged") is said
    assert not [line for line in text if line.strip() in {"charged", "not charged", "not"}]
