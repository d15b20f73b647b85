"""The run screen's narrow layout: one column that scrolls, for a terminal under 80x24 (a
phone's browser through `loopdeck serve`: about 43x40 held upright, 90x20 on its side). In the
order an operator on a phone needs it: what waits on them (the write with its tool and
arguments, or the question), the last calls (id, tool, status: a running call's progress
too), the budgets in a line or two, the findings when there are any. The header, the goal and
the stop's panel above it are the wide layout's own, restyled (`loopdeck.tcss`:
`RunScreen.-phone`)."""

from __future__ import annotations

from dataclasses import dataclass

from rich.cells import cell_len, set_cell_size
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.content import Content
from textual.reactive import reactive
from textual.widget import Widget
from textual.widgets import Static

from loopdeck.core.approvals import ApprovalRequest
from loopdeck.core.budgets import Cap, CapUsage
from loopdeck.core.outcome import CallRecord
from loopdeck.core.text import plural
from loopdeck.operator.runview import RunView
from loopdeck.tui.call_status import GUARD_HELD_LOOK, STATUS_LOOK, status_label
from loopdeck.tui.findings_panel import FindingsPanel
from loopdeck.tui.panels import args_text, cap_var, elapsed_text, paint, title
from loopdeck.tui.shown import plain, visible

CALLS_SHOWN = 5  # the last calls listed; `t` (the transcript) has them all
TOOL_KEPT = 12  # columns a tool keeps beside a running call's progress (the progress is cut)
ARGS_SHOWN = 8  # a waiting write's arguments, in lines; its dialog (`a`) shows them all
WRITE_KEYS = "a approve… · r reject…"
Word = tuple[str, str]  # words and their style


@dataclass(frozen=True, slots=True)
class CallLine:
    """One call as the narrow column lists it: the tool gives way first (to TOOL_KEPT
    columns), then a running call's progress, never the status's own word."""

    call_id: str
    tool: str
    status: str
    color: str
    word: int  # the status's own word, before its progress ("running" of "running 30% …")

    def drawn(self, id_width: int, tool_width: int, status_width: int) -> Content:
        return Content.assemble(
            (self.call_id.ljust(id_width), "bold"),
            "  ",
            set_cell_size(_cut(self.tool, tool_width), tool_width),
            "  " if tool_width else " ",
            (_cut(self.status, max(status_width, self.word)), f"${self.color}"),
        )


def _cut(text: str, width: int) -> str:
    """`text` in `width` columns at most, "…" where it was cut."""
    if cell_len(text) <= width:
        return text
    return set_cell_size(text, width - 1) + "…" if width > 1 else ""


class PhoneCalls(Widget):
    """The run's last calls, a line each, cut to the column's width as it is drawn."""

    lines: reactive[tuple[CallLine, ...]] = reactive((), layout=True)

    def show(self, view: RunView, said: str) -> None:
        rows = list(view.calls.values())[-CALLS_SHOWN:]
        self.lines = tuple(_call_line(row, row.call_id == view.guard_held) for row in rows)
        title(self, f"Calls · {view.calls_seen:,}{said}")
        title(self, "t log" if view.calls_seen > len(rows) else "", sub=True)

    def render(self) -> Content:
        if not self.lines:
            return Content.styled("no calls yet", "dim")
        id_width = max(cell_len(line.call_id) for line in self.lines)
        statuses = max(cell_len(line.status) for line in self.lines)
        words = max(line.word for line in self.lines)
        room = self.content_size.width - id_width - 4  # the statuses' and tools' columns
        tools = max(cell_len(line.tool) for line in self.lines)
        tool_width = max(0, min(tools, max(room - statuses, min(TOOL_KEPT, room - words))))
        status_width = room - tool_width if tool_width else room + 1
        drawn = (line.drawn(id_width, tool_width, status_width) for line in self.lines)
        return Content("\n").join(drawn)


def _call_line(row: CallRecord, guard_held: bool) -> CallLine:
    """A call's line: its status as the wide Calls table says it (a running call's progress
    too), or the guard's hold."""
    look = GUARD_HELD_LOOK if guard_held else STATUS_LOOK[row.status]
    words = look[0] if guard_held else status_label(row)
    return CallLine(visible(row.call_id), visible(row.tool), words, look[1], cell_len(look[0]))


class PhoneBudgets(Widget):
    """Each cap `label N%` in its color, as many to a line as the width holds: its figures
    are the wide layout's Budgets panel's."""

    words: reactive[tuple[Word, ...]] = reactive((), layout=True)

    def show(self, view: RunView, agent_s: float, operator_s: float) -> None:
        words: list[Word] = []
        for cap, usage in view.caps.items():
            if cap is Cap.DEADLINE:  # the clock as it runs, not as the last event had it
                usage = CapUsage(agent_s, usage.limit, agent_s)
            fired = " ◀ fired" if view.fired_cap == cap else ""
            used = f"{usage.fraction:.0%}" if usage.used is not None else "unknown"
            words.append((f"{cap.label} {used}{fired}", cap_var(view, cap, usage.fraction)))
        if operator_s >= 1 or view.held:
            words.append((f"waiting on you {elapsed_text(operator_s)}, not charged", "$warning"))
        if view.model_retries:
            n = view.model_retries
            words.append((f"↻ {n} model {'retry' if n == 1 else 'retries'}", "$warning"))
        self.words = tuple(words)

    def render(self) -> Content:
        if not self.words:
            return Content.styled("no budget yet", "dim")
        width = max(1, self.content_size.width)
        lines: list[list[Content]] = [[]]
        used = 0
        for text, style in self.words:
            if lines[-1] and used + 3 + cell_len(text) > width:
                lines.append([])
                used = 0
            if lines[-1]:
                lines[-1].append(Content.styled(" · ", "dim"))
                used += 3
            lines[-1].append(Content.styled(text, style))
            used += cell_len(text)
        return Content("\n").join(Content("").join(parts) for parts in lines)


def waiting_shown(request: ApprovalRequest, risk: str) -> tuple[str, dict[str, str]]:
    """A write that waits: its tool and risk, its arguments' first lines, what is left said."""
    lines = args_text(request.args).split("\n")
    more = len(lines) - ARGS_SHOWN
    cut = f"\n[dim]… {plural(more, 'more line')}: a shows them all[/]" if more > 0 else ""
    var = "read" if risk == "read" else "write"
    text = f"[b]$tool[/]  risk [b $risk-{var}]$risk[/]\n$args{cut}"
    return text, {"tool": request.tool, "risk": risk, "args": "\n".join(lines[:ARGS_SHOWN])}


class PhoneColumn(VerticalScroll):
    """What the narrow layout shows, drawn from the view and what waits on the operator."""

    def compose(self) -> ComposeResult:
        yield Static(id="phone-waiting", classes="panel")
        yield PhoneCalls(id="phone-calls", classes="panel")
        yield PhoneBudgets(id="phone-budgets", classes="panel")
        yield FindingsPanel(id="phone-findings", classes="panel")

    def show(self, view: RunView, agent_s: float, operator_s: float, calls_said: str) -> None:
        self.query_one(PhoneCalls).show(view, calls_said)
        self.query_one(PhoneBudgets).show(view, agent_s, operator_s)
        title(self.query_one(PhoneBudgets), "Budgets")
        findings = self.query_one(FindingsPanel)
        findings.display = not view.findings.empty
        if findings.display:
            title(findings, "Findings")
            findings.show(view)

    def show_budgets(self, view: RunView, agent_s: float, operator_s: float) -> None:
        self.query_one(PhoneBudgets).show(view, agent_s, operator_s)

    def show_waiting(
        self, write: ApprovalRequest | None, risk: str, question: tuple[str, str] | None
    ) -> None:
        """The first write waiting, else the first question; nothing waits: no panel."""
        panel = self.query_one("#phone-waiting", Static)
        panel.display = write is not None or question is not None
        if write is not None:
            title(panel, plain(f"Waiting on you · {write.call_id}"))
            title(panel, WRITE_KEYS, sub=True)
            paint(panel, *waiting_shown(write, risk))
        elif question is not None:
            question_id, text = question
            title(panel, plain(f"Question · {question_id}"))
            title(panel, "w answers", sub=True)
            paint(panel, "$text", {"text": text})
