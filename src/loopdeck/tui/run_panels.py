"""What the run screen shows, drawn from its view: `RunPanels`. Each panel renders itself from
a `RunView` (`panels`); this part says which, when and with what: every panel once a frame
of events (`RunScreen.flush`), what moves with time on the spinner's tick (the header's
clocks, the plan's spinner, the budgets, a grant's expiry), the header (the run, its clocks,
what waits here and in the store's other runs), which layout the terminal's size takes (under
80x24 the narrow one, `phone_panels`; under 40x16 a notice over it), and the transcript (its
side panel a live tail; `t` has everything)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.screen import Screen
from textual.widgets import Static

from loopdeck.core.events import CallStatus
from loopdeck.core.text import plural
from loopdeck.operator import run_waits
from loopdeck.operator.links import ReplayLink, RunLink
from loopdeck.operator.runview import RunView
from loopdeck.operator.transcript import Entry, Transcript
from loopdeck.tui import link_facets
from loopdeck.tui.calls_table import CallsTable
from loopdeck.tui.findings_panel import FindingsPanel
from loopdeck.tui.grants_panel import GrantsPanel, grants_room, grants_said
from loopdeck.tui.keys_bar import KeysBar
from loopdeck.tui.panels import (
    BudgetPanel,
    CallDetail,
    GoalLine,
    OutcomePanel,
    PlanPanel,
    RunHeader,
    StateMachinePanel,
    title,
)
from loopdeck.tui.phone_panels import PhoneColumn
from loopdeck.tui.shared_state import SharedState
from loopdeck.tui.shown import markup
from loopdeck.tui.transcript_view import TranscriptLog, TranscriptScreen

RUNNING = (CallStatus.PROPOSED, CallStatus.RUNNING)  # the Call panel holds its height
PANEL_KEPT = 200  # lines the transcript side panel keeps (a live tail; `t` has everything)
WIDE_SIZE = (80, 24)  # the panels side by side; under it, one column (`phone_panels`)
MIN_SIZE = (40, 16)  # under it even the column cannot show a run: a notice says so
TITLES = {"states": "State", "plan": "Plan", "budgets": "Budgets", "calls": "Calls"}
TITLES |= {"findings": "Findings", "detail": "Call", "transcript-panel": "Transcript · t"}


def composed() -> ComposeResult:
    """The run screen's widgets: both layouts, the stylesheet showing one (`-phone`)."""
    yield Static(id="too-small")
    yield RunHeader(id="run-header")
    yield GoalLine(id="goal")
    with Horizontal(id="top"):
        yield StateMachinePanel(id="states", classes="panel")
        yield PlanPanel(id="plan", classes="panel")
        yield BudgetPanel(id="budgets", classes="panel")
    yield OutcomePanel(id="outcome", classes="panel")
    yield GrantsPanel(id="grants", classes="panel")
    yield CallsTable(id="calls", classes="panel")
    with Horizontal(id="bottom"):
        yield FindingsPanel(id="findings", classes="panel")
        yield CallDetail(id="detail", classes="panel")
        yield TranscriptLog(id="transcript-panel", classes="panel", keep=PANEL_KEPT)
    yield PhoneColumn(id="phone")
    yield KeysBar()


class RunPanels:
    """The run screen's panels, drawn from the view the screen hands over; the run's state
    is the screen's, and nothing here holds any of it."""

    def __init__(self, screen: Screen[None], link: RunLink, shared: SharedState) -> None:
        self.screen = screen
        self.link = link
        self.shared = shared
        self.frame = 0  # the spinner's step
        # A replay shows a run that is over at each of its events: nothing turns, no key of
        # a live run (`G`) is offered.
        self.live = not isinstance(link, ReplayLink)
        self.full_transcript: TranscriptScreen | None = None  # `t`, while it is open
        self.phone = False  # the narrow layout: one column (`phone_panels`)

    def titled(self) -> None:
        for widget_id, text in TITLES.items():
            title(self.screen.query_one(f"#{widget_id}"), text)

    def show(self, view: RunView, now: datetime) -> None:
        """Every panel, as the view stands at `now`."""
        query = self.screen.query_one
        self.show_header(view, now)
        query(GoalLine).show(view)
        query(StateMachinePanel).show(view)
        query(PlanPanel).show(view, self.waiting_for(view), self.frame)
        self._show_budgets(view, now)
        query(OutcomePanel).show(view)
        query(FindingsPanel).show(view)
        table = query(CallsTable)
        table.sync(view)
        repeats = f" · {plural(view.repeats, 'repeat')} blocked" if view.repeats else ""
        if view.unknown:  # only the operator can say whether those took effect
            unknown = plural(len(view.unknown), "outcome")
            repeats += f" · [b $warning]{unknown} unknown · o[/]"
        if self.phone or not grants_room(self.screen, view):  # no room for the Grants panel
            repeats += grants_said(view, self.live)
        title(table, f"Calls · {view.calls_seen:,}{repeats}")
        if table.row_count:
            self.show_detail(view, table.cursor_key)
        if self.phone:
            query(GrantsPanel).display = False
            query(PhoneColumn).show(view, *view.times(now), repeats)
        else:
            query(GrantsPanel).show(view, self.live)

    def tick(self, view: RunView, now: datetime, frame_due: bool) -> None:
        """The spinner's step: what moves with time is drawn again, unless a frame of events
        is due (it draws all of this, the spinner's step too)."""
        self.frame += 1
        if not frame_due:
            self.show_header(view, now)
            if not view.plans:
                self.screen.query_one(PlanPanel).show(view, self.waiting_for(view), self.frame)
            if not view.finished:  # under a dialog too: "waiting on you" counts there
                self._show_budgets(view, now)
        if view.grants.rows and not self.phone:  # a grant's time runs out with no event
            self.screen.query_one(GrantsPanel).show(view, self.live)

    def show_header(self, view: RunView, now: datetime) -> None:
        """The run, its clocks, and what waits: here, and in the store's other runs."""
        agent_s, operator_s = view.times(now)
        pending, questions = len(self.link.pending()), len(self.link.questions())
        by_run = self.shared.waiting_by_run
        elsewhere = sum(n for run_id, n in by_run.items() if run_id != view.run_id)
        outage = link_facets.store_outage(self.link)  # an attached run's store, unreadable
        outage = outage or view.store_outage  # the run holds: its store takes no writes
        frame = self.frame if self.live else None
        parked = None  # its worker let it go: nothing turns, and what wakes it is said
        if link_facets.parked(self.link) and not view.finished:
            parked = run_waits.parked_words(view, link_facets.workerless(self.link))
        self.screen.query_one(RunHeader).show(
            view, agent_s, operator_s, pending, frame, elsewhere, outage, questions, parked
        )
        if self.phone:
            self._show_waiting()

    def _show_waiting(self) -> None:
        """The narrow column's first panel: the first write waiting, else the question."""
        pending, questions = self.link.pending(), self.link.questions()
        write = pending[0] if pending else None
        risk = self.link.risk_of(write.tool) if write is not None else ""
        question = questions[0] if questions else None
        self.screen.query_one(PhoneColumn).show_waiting(write, risk, question)

    def waiting_for(self, view: RunView) -> str:
        if not self.live:
            return ""
        if view.run_id:
            return run_waits.waiting_for(view)
        return link_facets.phase(self.link) or "the run to start"

    def _show_budgets(self, view: RunView, now: datetime) -> None:
        agent_s, operator_s = view.times(now)
        self.screen.query_one(BudgetPanel).show(view, agent_s, operator_s)
        if self.phone:
            self.screen.query_one(PhoneColumn).show_budgets(view, agent_s, operator_s)

    def show_detail(self, view: RunView, call_id: str | None) -> None:
        """The selected call in full in the Call panel."""
        row = view.calls.get(call_id or "")
        following = self.screen.query_one(CallsTable).at_newest and not view.finished
        self.screen.query_one(CallDetail).show(
            row,
            view.decided.get(call_id or "", ""),
            hold_height=following and row is not None and row.status in RUNNING,
            guard_held=row is not None and row.call_id == view.guard_held,
        )

    def feed_transcript(self, entries: list[Entry]) -> None:
        """New entries to the side panel (a live tail) and to `t`'s screen while it is open."""
        if not entries:
            return
        panel = self.screen.query_one("#transcript-panel", TranscriptLog)
        if panel.display:  # while it follows, only what fits is drawn (`TranscriptLog.add`)
            panel.add(entries)
        if self.full_transcript is not None:
            self.full_transcript.add(entries)

    def open_transcript(self, transcript: Transcript, run_id: str) -> None:
        """`t`: everything the run said and did, on a screen of its own, fed while open."""
        if self.full_transcript is not None:
            return
        heading = markup("[b]Transcript[/] · run $run · esc returns to the run", run=run_id or "…")
        self.full_transcript = TranscriptScreen(transcript, heading)

        def closed(_: None) -> None:
            self.full_transcript = None

        self.screen.app.push_screen(self.full_transcript, closed)

    def calls_focused(self) -> None:
        """Back from a dialog: the arrows move the Calls selection. Textual gave the focus
        back to the first focusable panel, one that is not even shown while a run is live."""
        focused = self.screen.focused
        if focused is None or not focused.display or not focused.visible:
            self.screen.query_one(PhoneColumn if self.phone else CallsTable).focus()

    def fit(self, width: int, height: int, view: RunView, now: Callable[[], datetime]) -> None:
        """The panels in a screen resized to `width` x `height`; a change of layout draws
        the one that shows now (the column is drawn only while it shows)."""
        was_phone = self.phone
        self.check_size(width, height)
        self.screen.query_one(CallsTable).fit(view)
        if self.phone != was_phone:
            self.show(view, now())
            self.screen.refresh_bindings()  # `a`, `r`: the column's keys
            self.screen.query_one(PhoneColumn if self.phone else CallsTable).focus()

    def check_size(self, width: int, height: int) -> None:
        """The layout for a terminal of `width` x `height`: under 80x24 one column; under
        40x16, where even that cannot show a run, a notice over it."""
        self.phone = width < WIDE_SIZE[0] or height < WIDE_SIZE[1]
        self.screen.set_class(self.phone, "-phone")
        notice = self.screen.query_one("#too-small", Static)
        small = width < MIN_SIZE[0] or height < MIN_SIZE[1]
        notice.display = small
        if small:  # short: whole on a line from 40 columns, a dialog over the run leaves it
            notice.update(
                f"{width}x{height} is too small: enlarge to {MIN_SIZE[0]}x{MIN_SIZE[1]} · t log"
            )
