"""Headless output: a Rich summary of a finished run, or one JSON object on the last line."""

from __future__ import annotations

import json
import sys

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from loopdeck.core.events import CallStatus
from loopdeck.core.outcome import RunOutcome
from loopdeck.core.states import StopReason
from loopdeck.core.text import short_args, visible

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
    console = console or Console()
    ok = outcome.stop_reason is StopReason.GOAL_MET
    style = "bold green" if ok else "bold red"
    console.print(
        f"[bold]run[/] {outcome.run_id}  [bold]env[/] {outcome.env}  "
        f"[bold]script[/] {outcome.script or '-'}  [bold]model[/] {outcome.model}  "
        f"[bold]mode[/] {outcome.mode}"
    )
    table = Table(title="calls", show_lines=False, expand=False)
    for column in ("#", "round", "tool", "arguments", "fingerprint", "status", "ms"):
        table.add_column(column)
    for call in outcome.calls:
        status = f"[{STATUS_STYLE[call.status]}]{call.status.value}[/]"
        table.add_row(
            call.call_id,
            str(call.round),
            call.tool,
            short_args(call.args, 48),
            call.fingerprint,
            status,
            "" if call.duration_ms is None else f"{call.duration_ms:.0f}",
        )
    if outcome.calls:
        console.print(table)
    for finding in outcome.findings:
        console.print(f"[yellow]finding[/] {finding}")
    cost = "unknown" if outcome.cost_usd is None else f"${outcome.cost_usd:.6f}"
    waited = (
        f" · waiting on you {outcome.operator_wait_s:.2f}s (not charged)"
        if outcome.operator_wait_s >= 0.01
        else ""
    )
    console.print(
        f"rounds {outcome.rounds:,} · model calls {outcome.model_calls:,} · tool calls "
        f"{outcome.tool_calls:,} · tokens {outcome.tokens:,} · cost {cost} · "
        f"agent time {outcome.elapsed_s:.2f}s{waited}"
    )
    console.print(
        f"[{style}]{outcome.state.value}: {outcome.stop_reason.value}[/] — "
        f"{escape(visible(outcome.detail))}"
    )
    if outcome.stray:
        console.print(
            f"[bold yellow]still running[/] {escape(outcome.stray)}: the run did not wait for "
            "it; it ends with this process"
        )


def print_json(outcome: RunOutcome) -> None:
    sys.stdout.write(json.dumps(outcome.summary_json(), ensure_ascii=False) + "\n")
    sys.stdout.flush()
