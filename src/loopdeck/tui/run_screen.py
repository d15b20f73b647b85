"""The main screen: one run, side by side, with the kill switch and the approval queue."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from textual import events, on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.screen import Screen
from textual.widgets import Static
from textual.worker import Worker, WorkerState

from loopdeck.core.events import CallStatus, EventBase
from loopdeck.core.outcome import RunOutcome
from loopdeck.core.runtime import Runtime
from loopdeck.core.text import plural
from loopdeck.operator.links import RunLink
from loopdeck.operator.runview import RunView
from loopdeck.operator.transcript import Entry, Transcript
from loopdeck.tui.approval_offers import ApprovalOffers, ApprovalsChanged
from loopdeck.tui.calls_table import CallsTable
from loopdeck.tui.dialogs import ConfirmKillDialog, ConfirmQuitDialog
from loopdeck.tui.frame_pacing import FRAME_INTERVAL_S, FramePacer, tail_that_fits
from loopdeck.tui.keys_bar import KeysBar
from loopdeck.tui.panels import (
    BudgetPanel,
    CallDetail,
    FindingsPanel,
    GoalLine,
    OutcomePanel,
    PlanPanel,
    RunHeader,
    StateMachinePanel,
    title,
)
from loopdeck.tui.shown import markup, toast
from loopdeck.tui.transcript_view import TranscriptLog, TranscriptScreen

RUNNING = (CallStatus.PROPOSED, CallStatus.RUNNING)  # the Call panel holds its height
PANEL_KEPT = 200  # lines the transcript side panel keeps (a live tail; `t` has everything)
SPIN_INTERVAL_S = 0.2
MIN_SIZE = (80, 24)


class RunScreen(Screen[None]):
    is_run_screen = True  # how the app finds a run's screen without importing this module

    HORIZONTAL_BREAKPOINTS = [(0, "-tiny"), (100, "-narrow"), (140, "-wide")]
    VERTICAL_BREAKPOINTS = [(0, "-cramped"), (28, "-short"), (40, "-tall")]
    BINDINGS = [
        Binding("w", "approvals", "Approvals", id="run.approvals"),
        Binding("t", "transcript", "Transcript", id="run.transcript"),
        Binding("escape", "back", "Fleet", id="run.back"),
        Binding("left_square_bracket", "plan(-1)", "Prev plan", id="plan.prev", show=False),
        Binding("right_square_bracket", "plan(1)", "Next plan", id="plan.next", show=False),
    ]

    def __init__(self, link: RunLink, now: Callable[[], datetime]) -> None:
        super().__init__()
        self.link = link
        self.now = now
        self.view = RunView()
        self.transcript = Transcript()
        self.outcome: RunOutcome | None = None
        self.driven = False
        self.quitting = False
        self._buffer: list[EventBase] = []
        # `flush` looked up at each frame, not bound here: the screen's own, as it is then
        self._pacer = FramePacer(self, link, self._buffer, lambda: self.flush())
        self.offers = ApprovalOffers(self, link, now, put_off=self._render_header)
        self._transcript_screen: TranscriptScreen | None = None
        self._frame = 0
        self._unsubscribe: list[Callable[[], None]] = []

    @property
    def runtime(self) -> Runtime:
        """The in-process runtime (local runs only)."""
        assert self.link.runtime is not None
        return self.link.runtime

    def compose(self) -> ComposeResult:
        yield Static(id="too-small")
        yield RunHeader(id="run-header")
        yield GoalLine(id="goal")
        with Horizontal(id="top"):
            yield StateMachinePanel(id="states", classes="panel")
            yield PlanPanel(id="plan", classes="panel")
            yield BudgetPanel(id="budgets", classes="panel")
        yield OutcomePanel(id="outcome", classes="panel")
        yield CallsTable(id="calls", classes="panel")
        with Horizontal(id="bottom"):
            yield FindingsPanel(id="findings", classes="panel")
            yield CallDetail(id="detail", classes="panel")
            yield TranscriptLog(id="transcript-panel", classes="panel", keep=PANEL_KEPT)
        yield KeysBar()

    def on_mount(self) -> None:
        titles = {"states": "State", "plan": "Plan", "budgets": "Budgets", "calls": "Calls"}
        titles |= {"findings": "Findings", "detail": "Call", "transcript-panel": "Transcript · t"}
        for widget_id, text in titles.items():
            title(self.query_one(f"#{widget_id}"), text)
        self._unsubscribe.append(self.link.subscribe(self._buffer.append))
        self._unsubscribe.append(self.link.on_approvals(self._queue_changed))
        self.app.theme_changed_signal.subscribe(
            self, lambda _: self.query_one(CallsTable).restyle(self.view)
        )
        self.set_interval(FRAME_INTERVAL_S, self._pacer.due)
        self.set_interval(SPIN_INTERVAL_S, self._tick)
        self._check_size(self.size.width, self.size.height)
        self.render_view()
        # The run starts once its screen is painted: the operator sees it before the agent
        # acts, and the first events do not wait behind the mount's layout.
        self.call_after_refresh(self.drive)

    def _queue_changed(self) -> None:
        self.post_message(ApprovalsChanged())

    async def on_unmount(self) -> None:
        for unsubscribe in self._unsubscribe:
            unsubscribe()
        close = getattr(self.link, "close", None)
        if close is not None:
            await close()

    def on_resize(self, event: events.Resize) -> None:
        self._check_size(event.size.width, event.size.height)
        self.query_one(CallsTable).fit(self.view)

    def _check_size(self, width: int, height: int) -> None:
        notice = self.query_one("#too-small", Static)
        small = width < MIN_SIZE[0] or height < MIN_SIZE[1]
        notice.display = small
        if small:
            notice.update(
                f"terminal is {width}x{height}: loopdeck needs at least "
                f"{MIN_SIZE[0]}x{MIN_SIZE[1]} to show a run; enlarge it (t opens the transcript)"
            )

    # -- the run, in a worker ------------------------------------------------------------
    @work(group="runtime", exclusive=True, exit_on_error=False, description="supervised run")
    async def drive(self) -> RunOutcome | None:
        return await self.link.drive()

    @on(Worker.StateChanged)
    def _worker_changed(self, event: Worker.StateChanged) -> None:
        if event.worker.group != "runtime":
            if event.state is WorkerState.ERROR:  # a decision's worker: said, never silent
                error = event.worker.error
                failed = f"{event.worker.description} failed: {type(error).__name__}: {error}"
                toast(self, failed, severity="error", timeout=30)
            return
        if event.state is WorkerState.SUCCESS:
            self.outcome = event.worker.result
            self.driven = True
            self.flush()
            self.after_drive()
            self.refresh_bindings()
        elif event.state is WorkerState.ERROR:
            self.driven = True
            self.flush()
            self.view.stop_reason = "crashed"
            self.view.stop_detail = f"{type(event.worker.error).__name__}: {event.worker.error}"
            toast(self, self.view.stop_detail, title="run crashed", severity="error", timeout=30)
            self.render_view()
            self.refresh_bindings()
        else:
            return
        if self.quitting:
            self.leave()

    def after_drive(self) -> None:
        """Called once the link's drive finished; a replay starts stepping from here."""

    # -- rendering, coalesced ------------------------------------------------------------
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

    def clock_now(self) -> datetime:
        """The time the screen shows the run at: now, or a replay's current event."""
        return self.now()

    def _tick(self) -> None:
        self._frame += 1
        if self._buffer:
            return  # a frame is on its way and draws all of this (the spinner's step too)
        self._render_header()
        if not self.view.plans:
            self.query_one(PlanPanel).show(self.view, self.waiting_for(), self._frame)
        if self.offers.dialog is None and not self.view.finished:
            self._render_budgets()

    def waiting_for(self) -> str:
        if self.view.run_id:
            return self.view.waiting_for()
        return getattr(self.link, "phase", "") or "the run to start"

    def _render_header(self) -> None:
        agent_s, operator_s = self.view.times(self.clock_now())
        pending = len(self.link.pending()) + len(self.link.questions())
        elsewhere = max(0, getattr(self.app, "waiting_total", 0) - pending)
        outage = getattr(self.link, "store_outage", "")  # an attached run's store, unreadable
        outage = outage or self.view.store_outage  # the run holds: its store takes no writes
        self.query_one(RunHeader).show(
            self.view, agent_s, operator_s, pending, self._frame, elsewhere, outage
        )

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
        title(table, f"Calls · {self.view.calls_seen:,}{repeats}")
        if table.row_count:
            self._show_detail(table.cursor_key)
        if self.view.finished:
            self.refresh_bindings()

    def _show_detail(self, call_id: str | None) -> None:
        row = self.view.calls.get(call_id or "")
        following = self.query_one(CallsTable).at_newest and not self.view.finished
        self.query_one(CallDetail).show(
            row,
            self.view.decided.get(call_id or "", ""),
            hold_height=following and row is not None and row.status in RUNNING,
        )

    @on(CallsTable.Highlighted, "#calls")
    def _show_call(self, event: CallsTable.Highlighted) -> None:
        self._show_detail(event.call_id)

    # -- the transcript ------------------------------------------------------------------
    def action_transcript(self) -> None:
        if self._transcript_screen is not None:
            return
        self.flush()
        title = markup(
            "[b]Transcript[/] · run $run · esc returns to the run", run=self.view.run_id or "…"
        )
        self._transcript_screen = TranscriptScreen(self.transcript, title)

        def closed(_: None) -> None:
            self._transcript_screen = None

        self.app.push_screen(self._transcript_screen, closed)

    # -- approvals -----------------------------------------------------------------------
    @on(ApprovalsChanged)
    def _approvals_changed(self) -> None:
        self.flush()
        self._render_header()
        self.refresh_bindings()
        self.offers.changed()

    def action_approvals(self) -> None:
        self.offers.reopen()

    # -- the kill switch, and leaving ------------------------------------------------------
    @property
    def running(self) -> bool:
        return not self.view.finished and not self.driven

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "approvals":
            return bool(self.link.pending() or self.link.questions())
        if action == "back":
            return bool(getattr(self.app, "fleet_home", False))
        return True

    def action_back(self) -> None:
        back = getattr(self.app, "back_to_fleet", None)
        if back is not None:
            back()

    def action_stop(self) -> None:
        self.link.stop(by="console")
        self.notify("stopping after the current tools")

    def action_kill(self) -> None:
        def confirmed(yes: bool | None) -> None:
            if yes:
                self.link.kill(by="console")

        self.app.push_screen(ConfirmKillDialog(), confirmed)

    def action_pause(self) -> None:
        if self.view.paused:
            self.link.resume(by="console")
        else:
            self.link.pause(by="console")

    def action_plan(self, delta: int) -> None:
        self.query_one(PlanPanel).browse(self.view, delta)

    def action_quit_run(self) -> None:
        """`q`: a live run of this process is killed (asked first, like `k`), then the screen
        is left once the run has recorded its stop. An attached console just detaches."""
        if self.quitting:
            return
        if not (self.running and self.link.runtime is not None):
            self.leave()
            return

        def confirmed(yes: bool | None) -> None:
            if yes and self.running:
                self.quitting = True
                self.offers.shut_down()
                self.link.kill(by="console (quit)")
            elif yes:
                self.leave()

        self.app.push_screen(ConfirmQuitDialog(), confirmed)

    def quit_killed(self, by: str) -> None:
        """Kill the live run without asking (a stop signal), and leave once it recorded it."""
        if self.quitting or not self.running:
            return
        self.quitting = True
        self.offers.shut_down()
        self.link.kill(by=by)

    def leave(self) -> None:
        self.flush()
        leave = getattr(self.app, "leave_run", None)
        if leave is not None:
            leave(self)
        else:
            self.app.exit(0)
