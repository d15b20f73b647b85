"""The run screen's panels. Each renders from a RunView; none holds run state of its own."""

from __future__ import annotations

import math
from collections.abc import Mapping

from rich.cells import cell_len
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.content import Content
from textual.widget import Widget
from textual.widgets import Static

from loopdeck.core.budgets import Cap, CapUsage
from loopdeck.core.outcome import CallRecord
from loopdeck.core.states import RunState
from loopdeck.core.text import plural, visible_json
from loopdeck.core.write_diff import CONTENT_FIELDS
from loopdeck.operator import transcript
from loopdeck.operator.runview import RunView
from loopdeck.tui.call_status import status_words, tool_as_run
from loopdeck.tui.line_refresh import LinesRefresh, border_row, changed_rows, lines_of, rows_only
from loopdeck.tui.shown import markup as shown_markup
from loopdeck.tui.shown import plain

SPINNER = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"

STATE_ORDER = [
    RunState.READY,
    RunState.PLANNING,
    RunState.DECIDING,
    RunState.AWAITING_APPROVAL,
    RunState.AWAITING_ANSWER,
    RunState.EXECUTING,
    RunState.REVIEWING,
    RunState.COMPLETE,
    RunState.STOPPED,
]


def paint(
    widget: Static, markup: str, values: Mapping[str, str] | None = None, width: int | None = None
) -> None:
    """Update only on a change: an unchanged panel is not drawn again, which is most of them
    on most frames of a runaway. Panels whose size the stylesheet fixes skip the layout pass;
    so does content that keeps its height in `width` columns (see `_same_height`).

    `markup` is loopdeck's own; outside text goes in `values`, shown in the `$name` slots as
    written (`shown.markup`), never parsed. `_painted` keeps the plain text on screen."""
    key = (markup, values)
    if getattr(widget, "_painted_key", None) == key:
        return
    content = shown_markup(markup, **(values or {}))
    before = getattr(widget, "_painted", None)
    widget._painted_key = key  # type: ignore[attr-defined]
    widget._painted = content.plain  # type: ignore[attr-defined]
    layout = not isinstance(widget, FixedSize)
    if layout and width is not None and before is not None:
        layout = not _same_height(before, content.plain, width)
    rows = None
    if isinstance(widget, LinesRefresh):  # only its lines that changed (`line_refresh`)
        lines, before_lines = lines_of(content), getattr(widget, "_painted_lines", None)
        widget._painted_lines = lines  # type: ignore[attr-defined]
        rows = None if layout else changed_rows(widget, before_lines, lines)
        if rows == []:
            return
    with rows_only(widget, rows):
        widget.update(content, layout=layout)


def title(widget: Widget, text: str | Content, *, sub: bool = False) -> None:
    """Set a border title (or subtitle) only when it changes: Textual parses the markup and
    repaints every line of the widget on each assignment, same title or not. A `str` is
    loopdeck's markup; a title holding outside text is `Content` (`shown.plain`)."""
    name = "_subtitle_set" if sub else "_title_set"
    before = getattr(widget, name, None)
    if type(before) is type(text) and before == text:
        return
    setattr(widget, name, text)
    with rows_only(widget, border_row(widget, bottom=sub)):
        if sub:
            widget.border_subtitle = text
        else:
            widget.border_title = text


def _same_height(before: str, after: str, width: int) -> bool:
    """True if both plain texts are as many lines as they have and no line wraps: then they
    take the same height, and a layout pass (a reflow and a repaint of the whole screen) is not
    needed. Tabs are expanded, so a text with one is measured by the layout."""
    lines = after.split("\n")
    if len(lines) != before.count("\n") + 1 or "\t" in after or "\t" in before:
        return False
    return all(cell_len(line) <= width for line in lines) and all(
        cell_len(line) <= width for line in before.split("\n")
    )


class FixedSize(LinesRefresh):
    """A panel the stylesheet sizes (the header, State, Plan, Budgets): its content never
    changes its size, so an update needs no layout, and repaints the lines that changed."""


def elapsed_text(seconds: float) -> str:
    if not math.isfinite(seconds):  # a cap raised past any rate's reach (`raise 1e308`)
        return "∞" if seconds > 0 else "0:00:00"
    seconds = max(0, int(seconds))
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


def countdown_text(seconds: float) -> str:
    seconds = max(0, math.floor(seconds))
    return f"{seconds // 60}:{seconds % 60:02d}"


class StateMachinePanel(FixedSize, Static):
    def show(self, view: RunView) -> None:
        lines = []
        for state in STATE_ORDER:
            count = view.entries.get(state, 0)
            label = f"{state.value:<17}{'x' + str(count) if count else '':>4}"
            if state is view.state:
                lines.append(f"[b reverse $state-lit]▶ {label}[/]")
            elif count:
                lines.append(f"  {label}")
            else:
                lines.append(f"[dim]  {label}[/dim]")
        title(self, plural(view.transitions, "transition"), sub=True)
        if view.paused:
            held = "PAUSED" if view.held == "paused" else "PAUSING"
            lines.append(f"[b $warning]⏸ {held}[/] before next model call")
        if view.stop_reason:
            var = "$success" if view.stop_reason == "goal_met" else "$error"
            lines.append(f"[b reverse {var}] ■ {view.stop_reason.upper()} [/]")
        paint(self, "\n".join(lines))


class OutcomePanel(VerticalScroll):
    """The stop, in full: its reason and whole detail (an ask_user question, an error),
    wrapped; a detail longer than the panel's room says so on its border (shift+tab focuses
    the panel, ↓ scrolls it)."""

    def compose(self) -> ComposeResult:
        yield Static(id="outcome-body")

    def on_mount(self) -> None:
        self.watch(self, "scroll_y", lambda _: self.say_more(), init=False)

    def on_resize(self) -> None:
        self.call_after_refresh(self.say_more)

    def say_more(self) -> None:
        title(self, "shift+tab ↓ more" if self.scroll_y < self.max_scroll_y else "", sub=True)

    def show(self, view: RunView) -> None:
        self.display = view.finished
        if self.has_class("-stopped") != view.finished:  # the stylesheet makes room for it
            for panel in self.screen.query("#outcome, #calls, #top, #bottom"):
                panel.set_class(view.finished, "-stopped")
        if not view.finished:
            return
        var = "$success" if view.stop_reason == "goal_met" else "$error"
        reason = view.stop_reason or ""
        title(self, plain(f"Stopped · {reason}"))
        label = "question" if reason == "ask_user" else "detail"
        paint(
            self.query_one("#outcome-body", Static),
            f"[b {var}]$reason[/]  [b]{label}[/] $detail",
            {"reason": reason.upper(), "detail": view.stop_detail},
        )
        self.call_after_refresh(self.say_more)


class PlanPanel(FixedSize, Static):
    shown_round: int | None = None

    def show(self, view: RunView, waiting: str = "", frame: int = 0) -> None:
        if not view.plans:
            text = "no plan yet" if view.mode != "react" else "ReAct: no planner"
            if waiting and not view.finished:
                text = f"[b $accent]{SPINNER[frame % len(SPINNER)]}[/] waiting for {waiting}"
            else:
                text = f"[dim]{text}[/dim]"
            title(self, "Plan")
            paint(self, text)
            return
        rounds = sorted(view.plans)
        shown = self.shown_round if self.shown_round in view.plans else rounds[-1]
        live = shown == rounds[-1] and not view.finished
        title(
            self,
            f"Plan · round {shown} of {len(rounds)}" + (" · [ ] browse" if len(rounds) > 1 else ""),
        )
        lines: list[str] = []
        steps: dict[str, str] = {}
        for index, step in enumerate(view.plans[shown], 1):
            steps[f"s{index}"] = step
            if live and view.plan_step == index:
                lines.append(f"[b $accent]▶ {index}. $s{index}[/]")
            else:
                lines.append(f"  {index}. $s{index}")
        paint(self, "\n".join(lines), steps)

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


def cap_var(view: RunView, cap: Cap, fraction: float) -> str:
    """A cap's color: fired or reached, near (three quarters), or clear."""
    if fraction >= 1 or view.fired_cap == cap:
        return "$error"
    return "$warning" if fraction >= 0.75 else "$success"


class BudgetPanel(FixedSize, Static):
    def show(self, view: RunView, elapsed: float, operator_s: float = 0.0) -> None:
        wide = self.size.width >= 50
        bar_width = 10 if self.size.width >= 40 or not self.size.width else 6
        lines = []
        caps = view.caps
        for cap in Cap:
            if (usage := caps.get(cap)) is None:
                continue
            if cap is Cap.DEADLINE:  # the clock as it runs, not as the last event had it
                usage = CapUsage(elapsed, usage.limit, elapsed)
            used, limit = usage.reported, usage.limit
            fraction = usage.fraction
            var = cap_var(view, cap, fraction)
            amount = usage.amount(cap)
            rate = ""
            # The pace of what is burnt and known: a floor's pace would mislead.
            if cap.burnt and cap is not Cap.DEADLINE and usage.known and elapsed >= 1 and used:
                rate = _rate(used / elapsed)
                if fraction >= 0.5 and used < limit:
                    # past half: when the cap is reached at this rate, in agent time
                    rate = "⇥" + countdown_text((limit - used) / (used / elapsed))
            fired = " [b $error]◀ fired[/]" if view.fired_cap == cap else ""
            rate_column = f" [dim]{rate:>8}[/]" if wide else ""
            bar = _bar(fraction, bar_width)
            lines.append(f"{cap.short_label:<10} [{var}]{bar}[/] {amount:<12}{rate_column}{fired}")
        if operator_s >= 1 or view.held:
            # "not charged" beside it where it fits; never wrapped below the panel's last line
            waited = f"waiting on you {elapsed_text(operator_s)}"
            fits = not self.size.width or len(waited) + len(" not charged") <= self.size.width
            lines.append(f"[b $warning]{waited}[/]" + (" [dim]not charged[/]" if fits else ""))
        error = ""
        if view.model_retries:
            error = view.last_model_error[:40]
            n = view.model_retries
            retries = f"{n} model {'retry' if n == 1 else 'retries'}"
            lines.append(f"[b $warning]↻ {retries}[/] [dim]$error[/]")
        if view.context_note:  # our own words and figures: no outside text
            lines.append(f"[dim]{view.context_note}[/]")
        paint(self, "\n".join(lines), {"error": error})


def args_text(args: dict[str, object]) -> str:
    """A call's arguments as JSON; a file's content (`content`, `text`) below them as its
    lines, never one escaped string (the approval shows it as a diff)."""
    texts = {k: v for k, v in args.items() if k in CONTENT_FIELDS and isinstance(v, str)}
    if not texts:
        return visible_json(args)
    rest = visible_json({k: v for k, v in args.items() if k not in texts})
    shown = [f"{name} · {plural(len(value.splitlines()), 'line')}:\n{value}"
             for name, value in texts.items()]  # fmt: skip
    return "\n".join([rest, *shown])


class CallBody(LinesRefresh, Static):
    """The Call panel's text: a runaway's next call mostly reads as the last one did."""


class CallDetail(LinesRefresh, VerticalScroll):
    """The selected call in full: focus it (tab or click) and scroll with keys or the wheel."""

    def compose(self) -> ComposeResult:
        yield CallBody(id="detail-body")

    def show(
        self,
        row: CallRecord | None,
        decided: str = "",
        hold_height: bool = False,
        guard_held: bool = False,
    ) -> None:
        """`hold_height` (the screen follows a live run's newest call while it runs): the
        text does not get shorter than what is shown, blank lines make up the difference. In
        a runaway the newest call alternates between running (one line of result) and done
        (its result) from frame to frame, and each change of the text's height is a layout
        pass of the whole screen."""
        body = self.query_one("#detail-body", Static)
        if row is None:
            title(self, "Call")
            paint(body, "[dim]select a call to see its arguments and result[/dim]")
            return
        title(self, plain(f"Call {row.call_id} · {tool_as_run(row.tool, decided)}"))
        values = {
            "args": args_text(row.args),
            "result": visible_json(row.result) if row.result else "—",
            "decided": decided,
            "fingerprint": row.fingerprint,
            "state": row.state_hash,
            "source": f" ({row.risk_source})" if row.risk_source else "",
            "status": status_words(row, guard_held),  # its progress: the tool's own words
        }
        approval = "[b]approval[/] $decided\n" if decided else ""
        ms = (
            "" if row.duration_ms is None else f"  [b]took[/] {transcript.ms_text(row.duration_ms)}"
        )
        text = (
            f"[b]status[/] $status{ms}  [b]risk[/] {row.risk}$source\n"
            "[b]fingerprint[/] $fingerprint  [b]state[/] $state\n"
            f"{approval}[b]arguments[/]\n$args\n[b]result[/]\n$result"
        )
        shown = getattr(body, "_painted", None)
        if hold_height and shown is not None:
            lines = text.count("\n") + sum(value.count("\n") for value in values.values())
            text += "\n " * (shown.count("\n") - lines)
        paint(body, text, values, width=body.content_size.width)


class GoalLine(Static):
    def show(self, view: RunView) -> None:
        paint(
            self,
            "[b]goal[/] $goal" if view.goal else "[b]goal[/] [dim]…[/dim]",
            {"goal": view.goal},
        )


class RunHeader(FixedSize, Static):
    """State and the approvals badge first: a narrow terminal cuts the end, not those."""

    def show(
        self,
        view: RunView,
        agent_s: float,
        operator_s: float,
        pending: int,
        frame: int | None = 0,
        elsewhere: int = 0,
        outage: str = "",
        questions: int = 0,
        parked: tuple[str, str] | None = None,
    ) -> None:
        """`pending` writes and `questions` wait here for the operator; `elsewhere` in other
        runs of the store; `frame` the spinner's step while the run goes on (None: a replay,
        nothing turns; `parked`: its worker let it go, nothing runs: its state and what wakes
        it, `run_waits.parked_words`)."""
        state, then = parked or (view.shown_state, "")
        then = f" · {then}" if then else ""
        badge = " [b $error]$outage[/]" if outage else ""  # the store cannot be read for now
        waiting = [plural(n, what) for n, what in ((pending, "approval"), (questions, "question"))]
        if pending or questions:
            said = ", ".join(w for w in waiting if not w.startswith("0 "))
            badge += f" [b reverse $warning] ⚠ {said} waiting · w [/]"
        if elsewhere:
            badge += f" [b $warning]+{elsewhere} in other runs · i[/]"
        badge += then
        turning = frame is not None and not view.finished and bool(view.run_id) and parked is None
        spin = f"{SPINNER[(frame or 0) % len(SPINNER)]} " if turning else ""
        waited = f" · waiting on you {elapsed_text(operator_s)}" if operator_s >= 1 else ""
        run = view.run_id or "starting…"
        script = "/$script" if view.script else ""
        # Where a worker runs it: its host by the run, its last move and its fork's source
        # at the end (a narrow terminal cuts those first). A field not known yet (the env
        # and model before the run's first event) is left out, not joined empty.
        host = " on [b]$host[/]" if view.host and parked is None else ""  # parked: on none
        known = {f"[b]$env[/]{script}": view.env, "$model": view.model,
                 "[dim]$moved[/]": view.moved, "[dim]$forked[/]": view.forked}  # fmt: skip
        fields = [f"run [b]$run[/]{host}", *(f for f, value in known.items() if value)]
        paint(
            self,
            f"{spin}[b reverse $accent] {state} [/]{badge} · ⏱ {elapsed_text(agent_s)}{waited}"
            f" · {' · '.join(fields)} · [dim]loopdeck[/]",
            {"run": run, "env": view.env, "script": view.script or "", "model": view.model,
             "outage": outage, "host": view.host, "moved": view.moved, "forked": view.forked},
        )  # fmt: skip
