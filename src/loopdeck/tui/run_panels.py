"""The run screen's panels, drawn from the view: events arrive in a buffer and are folded
and drawn at most once a frame (`FramePacer`); the spinner's tick redraws what moves."""

from __future__ import annotations

from textual import events, on

from loopdeck.core.events import CallStatus
from loopdeck.core.text import plural
from loopdeck.operator.transcript import Entry
from loopdeck.tui.calls_table import CallsTable
from loopdeck.tui.frame_pacing import tail_that_fits
from loopdeck.tui.panels import (
    BudgetPanel,
    CallDetail,
    FindingsPanel,
    GoalLine,
    OutcomePanel,
    PlanPanel,
    StateMachinePanel,
    title,
)
from loopdeck.tui.run_header import RunHeaderPart
from loopdeck.tui.transcript_view import TranscriptLog

RUNNING = (CallStatus.PROPOSED, CallStatus.RUNNING)  # the Call panel holds its height
PANEL_KEPT = 200  # lines the transcript side panel keeps (a live tail; `t` has everything)


class RunPanelsPart(RunHeaderPart):
    def flush(self) -> None:
        """Fold what arrived into the view and the transcript, and draw it (`FramePacer`)."""
        if not self._buffer:
            return
        self._pacer.begun()
        events, self._buffer[:] = list(self._buffer), []
        entries: list[Entry] = []
        for event in events:
            self.view.apply(event)
            if entry := self.transcript.apply(event):
                entries.append(entry)
        self.feed_transcript(entries)
        self.render_view()

    def feed_transcript(self, entries: list[Entry]) -> None:
        if not entries:
            return
        panel = self.query_one("#transcript-panel", TranscriptLog)
        if panel.display:
            # The panel is a live tail (`t` has everything). A burst longer than the lines it
            # keeps replaces it with what fills its height; otherwise every entry is added.
            kept = tail_that_fits(entries, PANEL_KEPT)
            if len(kept) < len(entries) and panel.following:
                panel.show_tail(tail_that_fits(kept, panel.size.height))
            elif len(kept) < len(entries):
                panel.show_only(tail_that_fits(kept, panel.size.height))
            else:
                panel.add(entries)
        if self._transcript_screen is not None:
            self._transcript_screen.add(entries)

    def _tick(self) -> None:
        self._frame += 1
        if self._buffer:
            return  # a frame is on its way and draws all of this (the spinner's step too)
        self._render_header()
        if not self.view.plans:
            self.query_one(PlanPanel).show(self.view, self.waiting_for(), self._frame)
        if not self.view.finished:  # under a dialog too: "waiting on you" counts there
            self._render_budgets()

    def _render_budgets(self) -> None:
        agent_s, operator_s = self.view.times(self.clock_now())
        self.query_one(BudgetPanel).show(self.view, agent_s, operator_s)

    def render_view(self) -> None:
        self._render_header()
        self.query_one(GoalLine).show(self.view)
        self.query_one(StateMachinePanel).show(self.view)
        self.query_one(PlanPanel).show(self.view, self.waiting_for(), self._frame)
        self._render_budgets()
        self.query_one(OutcomePanel).show(self.view)
        self.query_one(FindingsPanel).show(self.view)
        table = self.query_one(CallsTable)
        table.sync(self.view)
        repeats = f" · {plural(self.view.repeats, 'repeat')} blocked" if self.view.repeats else ""
        if self.view.unknown:  # only the operator can say whether those took effect
            unknown = plural(len(self.view.unknown), "outcome")
            repeats += f" · [b $warning]{unknown} unknown · o[/]"
        title(table, f"Calls · {self.view.calls_seen:,}{repeats}")
        if table.row_count:
            self._show_detail(table.cursor_key)
        if self.view.finished:
            self.refresh_bindings()
            if self.app.screen is self:
                self.mark_seen()

    def _show_detail(self, call_id: str | None) -> None:
        row = self.view.calls.get(call_id or "")
        following = self.query_one(CallsTable).at_newest and not self.view.finished
        self.query_one(CallDetail).show(
            row,
            self.view.decided.get(call_id or "", ""),
            hold_height=following and row is not None and row.status in RUNNING,
            guard_held=row is not None and row.call_id == self.view.guard_held,
        )

    @on(CallsTable.Highlighted, "#calls")
    def _show_call(self, event: CallsTable.Highlighted) -> None:
        self._show_detail(event.call_id)

    def on_resize(self, event: events.Resize) -> None:
        self._check_size(event.size.width, event.size.height)
        self.query_one(CallsTable).fit(self.view)
