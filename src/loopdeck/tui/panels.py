"""The run screen's panels. Each renders from a RunView; none holds run state of its own."""

from __future__ import annotations

import math
from datetime import datetime

from rich.markup import escape
from textual.widgets import Static

from loopdeck.core.outcome import CallRecord
from loopdeck.core.states import RunState
from loopdeck.core.text import visible_json
from loopdeck.runview import RunView

STATE_ORDER = [
    RunState.READY,
    RunState.PLANNING,
    RunState.DECIDING,
    RunState.AWAITING_APPROVAL,
    RunState.EXECUTING,
    RunState.REVIEWING,
    RunState.COMPLETE,
    RunState.STOPPED,
]

VERDICT_VAR = {"pass": "$verdict-pass", "fail": "$verdict-fail", "stalled": "$verdict-stalled"}

CAP_LABELS = [
    ("turns", "turns"),
    ("tool_calls", "tool calls"),
    ("tokens", "tokens"),
    ("cost_usd", "cost $"),
    ("deadline_s", "time s"),
    ("rounds", "rounds"),
    ("corrections", "fixes"),
]


def elapsed_text(seconds: float) -> str:
    seconds = max(0, int(seconds))
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


def countdown_text(seconds: float) -> str:
    seconds = max(0, math.floor(seconds))
    return f"{seconds // 60}:{seconds % 60:02d}"


class StateMachinePanel(Static):
    def show(self, view: RunView) -> None:
        lines = []
        for state in STATE_ORDER:
            count = view.entries.get(state, 0)
            label = f"{state.value:<17}{'x' + str(count) if count else '':>5}"
            if state is view.state:
                lines.append(f"[b reverse $state-lit]▶ {label} [/]")
            elif count:
                lines.append(f"  {label}")
            else:
                lines.append(f"[dim]  {label}[/dim]")
        self.border_subtitle = f"{view.transitions} transitions"
        if view.paused:
            lines.append("[b $warning]⏸ PAUSED[/] before next model call")
        if view.stop_reason:
            var = "$success" if view.stop_reason == "goal_met" else "$error"
            lines.append(f"[b reverse {var}] ■ {view.stop_reason.upper()} [/]")
            width = max(10, self.content_size.width or 24)
            detail = view.stop_detail
            if len(detail) > width:
                detail = detail[: width - 1] + "…"
            lines.append(escape(detail))
        self.update("\n".join(lines))


class PlanPanel(Static):
    shown_round: int | None = None

    def show(self, view: RunView) -> None:
        if not view.plans:
            text = (
                "[dim]no plan yet[/dim]" if view.mode != "react" else "[dim]ReAct: no planner[/dim]"
            )
            self.border_title = "Plan"
            self.update(text)
            return
        rounds = sorted(view.plans)
        shown = self.shown_round if self.shown_round in view.plans else rounds[-1]
        live = shown == rounds[-1] and not view.finished
        self.border_title = f"Plan · round {shown} of {len(rounds)}" + (
            " · [ ] browse" if len(rounds) > 1 else ""
        )
        lines = []
        for number, step in enumerate(view.plans[shown], 1):
            if live and view.plan_step == number:
                lines.append(f"[b $accent]▶ {number}. {escape(step)}[/]")
            else:
                lines.append(f"  {number}. {escape(step)}")
        self.update("\n".join(lines))

    def browse(self, view: RunView, delta: int) -> None:
        rounds = sorted(view.plans)
        if not rounds:
            return
        current = self.shown_round if self.shown_round in view.plans else rounds[-1]
        index = max(0, min(len(rounds) - 1, rounds.index(current) + delta))
        self.shown_round = None if index == len(rounds) - 1 else rounds[index]
        self.show(view)


def _bar(fraction: float, width: int) -> str:
    filled = max(0, min(width, round(fraction * width)))
    return "█" * filled + "░" * (width - filled)


def _rate(per_second: float) -> str:
    if per_second >= 1000:
        return f"{per_second / 1000:.1f}k/s"
    if per_second >= 1:
        return f"{per_second:.1f}/s"
    return f"{per_second:.2g}/s"


class BudgetPanel(Static):
    def show(self, view: RunView, elapsed: float) -> None:
        wide = self.size.width >= 50
        lines = []
        for cap, label in CAP_LABELS:
            if cap not in view.budget:
                continue
            used, limit = view.budget[cap]
            if cap == "deadline_s":
                used = elapsed
            fraction = used / limit if limit else 0.0
            var = (
                "$error"
                if fraction >= 1 or view.fired_cap == cap
                else ("$warning" if fraction >= 0.75 else "$success")
            )
            if cap == "cost_usd":
                amount = "unknown" if view.cost_unknown_calls else f"{used:.4f}/{limit:g}"
            elif cap == "deadline_s":
                amount = f"{int(used)}/{limit:g}"
            else:
                amount = f"{used:g}/{limit:g}"
            rate = ""
            if cap not in ("deadline_s", "rounds", "corrections") and elapsed >= 1 and used:
                rate = _rate(used / elapsed)
            fired = " [b $error]◀ fired[/]" if view.fired_cap == cap else ""
            rate_column = f" [dim]{rate:>8}[/]" if wide else ""
            bar = _bar(fraction, 10)
            lines.append(f"{label:<10} [{var}]{bar}[/] {amount:<12}{rate_column}{fired}")
        if view.model_retries:
            error = escape(view.last_model_error[:40])
            lines.append(f"[b $warning]↻ {view.model_retries} model retries[/] [dim]{error}[/]")
        if view.last_compaction:
            before, after = view.last_compaction
            lines.append(f"[dim]context compacted x{view.compactions}: {before}→{after} tokens[/]")
        self.update("\n".join(lines))


class FindingsPanel(Static):
    def show(self, view: RunView) -> None:
        if not view.verdicts:
            self.update("[dim]no review yet[/dim]")
            return
        lines = []
        for verdict in view.verdicts:
            var = VERDICT_VAR.get(verdict.verdict, "$foreground")
            lines.append(f"round {verdict.round}  [b {var}]{verdict.verdict.upper()}[/]")
            lines.extend(f"  · {escape(reason)}" for reason in verdict.reasons)
        self.update("\n".join(lines))


class CallDetail(Static):
    def show(self, row: CallRecord | None) -> None:
        if row is None:
            self.border_title = "Call"
            self.update("[dim]select a call to see its arguments and result[/dim]")
            return
        self.border_title = f"Call {row.call_id} · {row.tool}"
        args = escape(visible_json(row.args))
        result = escape(visible_json(row.result)) if row.result else "—"
        self.update(
            f"[b]fingerprint[/] {row.fingerprint}  [b]state[/] {row.state_hash}  "
            f"[b]status[/] {row.status.value}\n[b]arguments[/]\n{args}\n[b]result[/]\n{result}"
        )


class RunHeader(Static):
    def show(self, view: RunView, now: datetime | None, pending: int) -> None:
        elapsed = 0.0
        if view.started_at and now:
            end = min(now, view.stopped_at) if view.stopped_at else now
            elapsed = (end - view.started_at).total_seconds()
        state = view.stop_reason or view.state.value
        badge = ""
        if pending:
            plural = "s" if pending != 1 else ""
            badge = f"  [b reverse $warning] ⚠ {pending} approval{plural} waiting · w [/]"
        run = view.run_id or "starting…"
        script = f"/{escape(view.script)}" if view.script else ""
        self.update(
            f"[b]loopdeck[/] · run [b]{run}[/] · [b]{escape(view.env)}[/]{script} · "
            f"{escape(view.model)} · ⏱ {elapsed_text(elapsed)} · [b $accent]{state}[/]{badge}"
        )
