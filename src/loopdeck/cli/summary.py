"""Headless output: a Rich summary of a finished run, or one JSON object on the last line."""

from __future__ import annotations

import json
import sys

from rich.console import Console
from rich.table import Table
from rich.text import Text

from loopdeck.core.budgets import Cap
from loopdeck.core.events import CallStatus
from loopdeck.core.outcome import CallRecord, RunOutcome
from loopdeck.core.states import StopReason
from loopdeck.core.text import capped, short_args, visible
from loopdeck.operator.context_words import context_text

STATUS_STYLE = {
    CallStatus.EXECUTED: "green",
    CallStatus.FAILED: "red",
    CallStatus.BLOCKED_REPEAT: "bold yellow",
    CallStatus.REJECTED: "magenta",
    CallStatus.REFUSED_DUPLICATE: "yellow",
    CallStatus.WITHDRAWN: "dim",
    CallStatus.PENDING_APPROVAL: "cyan",
    CallStatus.PROPOSED: "cyan",
    CallStatus.RUNNING: "cyan",
    CallStatus.INTERRUPTED: "red",
    CallStatus.SKIPPED: "dim",
    CallStatus.SKIPPED_AFTER_TRIP: "dim",
    CallStatus.OUTCOME_UNKNOWN: "bold red",
}


def print_summary(outcome: RunOutcome, console: Console | None = None) -> None:
    """The run's names, its calls, its findings, its figures, how it stopped, and what it
    left (a store that held it, a tool still running). Outside text (the env's names, the
    model's words) goes in as `Text`, never as markup."""
    console = console or Console()
    console.print(_head(outcome))
    if outcome.calls:
        console.print(_calls(outcome))
    for call in outcome.calls:
        if (failure := _failure(outcome.run_id, call)) is not None:
            console.print(failure)
    for finding in outcome.findings:
        console.print(Text.assemble(("finding", "yellow"), " ", visible(finding)))
    console.print(_figures(outcome))
    style = "bold green" if outcome.stop_reason is StopReason.GOAL_MET else "bold red"
    console.print(
        Text.assemble(
            (f"{outcome.state.value}: {outcome.stop_reason.value}", style),
            " — ",
            visible(outcome.detail),
        )
    )
    if context := context_text(outcome.context_window, outcome.compactions):
        console.print(Text(context, style="dim"))
    for held in outcome.recording_held:
        console.print(Text.assemble(("store", "bold yellow"), f" {visible(held)}"))
    if outcome.stray:
        console.print(
            Text.assemble(
                ("still running", "bold yellow"),
                f" {visible(outcome.stray)}: the run did not wait for it; it ends with this "
                "process",
            )
        )


def _head(outcome: RunOutcome) -> Text:
    head = Text()
    for label, value in (("run", outcome.run_id), ("env", outcome.env),
                         ("script", outcome.script or "-"), ("model", outcome.model),
                         ("mode", outcome.mode)):  # fmt: skip
        head.append(label, "bold").append(f" {visible(value)}  ")
    head.rstrip()
    return head


def _calls(outcome: RunOutcome) -> Table:
    table = Table(title="calls", show_lines=False, expand=False)
    for column in ("#", "round", "tool", "arguments", "fingerprint", "status", "ms"):
        table.add_column(column)
    for call in outcome.calls:
        status = Text(call.status.value, style=STATUS_STYLE[call.status])
        table.add_row(
            Text(visible(call.call_id)),
            str(call.round),
            Text(visible(call.tool)),
            Text(short_args(call.args, 48)),
            Text(visible(call.fingerprint)),
            status,
            "" if call.duration_ms is None else f"{call.duration_ms:.0f}",
        )
    return table


# What a tool did itself (raised, a ToolError, timed out): the table's status alone does not
# say why, and an env's author looks for the exception and its line.
_FAILED = frozenset({CallStatus.FAILED, CallStatus.OUTCOME_UNKNOWN})


def _failure(run_id: str, call: CallRecord) -> Text | None:
    """A failed call's error as the model was told it (a tool that raised: its exception and
    its line), and for a write whose outcome is unknown the command that settles it."""
    if call.status not in _FAILED:
        return None
    error = (call.result or {}).get("error")
    said = Text.assemble((f"{call.status.value}", STATUS_STYLE[call.status]), " ")
    said.append(f"{visible(call.call_id)} {visible(call.tool)}")
    if isinstance(error, dict) and error.get("message"):
        code = str(error.get("code") or "")
        named = f"{code}: " if code and code.lower() != call.status.value else ""
        said.append(f": {visible(named)}{capped(visible(str(error['message'])), 600)}")
    if call.status is CallStatus.OUTCOME_UNKNOWN:
        said.append(
            f" — say whether it took effect: loopdeck resolve {run_id}"
            f" {visible(call.call_id)} applied|not-applied"
        )
    return said


def _figures(outcome: RunOutcome) -> str:
    """The run's figures, each cap by its label (`Cap.label`); an unknown one says so."""
    cost = outcome.unknown(Cap.COST) if outcome.cost_usd is None else f"${outcome.cost_usd:.6f}"
    waited = (
        f" · waiting on you {outcome.operator_wait_s:.2f}s (not charged)"
        if outcome.operator_wait_s >= 0.01
        else ""
    )
    tokens = outcome.unknown(Cap.TOKENS) if outcome.tokens is None else f"{outcome.tokens:,}"
    return (
        f"{Cap.ROUNDS.label} {outcome.rounds:,} · model calls {outcome.model_calls:,} · "
        f"{Cap.TOOL_CALLS.label} {outcome.tool_calls:,} · {Cap.TOKENS.label} {tokens} · "
        f"{Cap.COST.label} {cost} · agent {Cap.DEADLINE.label} {outcome.elapsed_s:.2f}s{waited}"
    )


def print_json(outcome: RunOutcome) -> None:
    sys.stdout.write(json.dumps(outcome.summary_json(), ensure_ascii=False) + "\n")
    sys.stdout.flush()
