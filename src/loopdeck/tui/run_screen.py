"""The main screen: one run, side by side, with the kill switch and the approval queue.

`RunScreen` is its state, its widgets and the worker that drives the run; each other concern
is a part it is built from: `run_header` (its state's shape, the header), `run_panels` (the
panels, drawn once a frame), `run_keys` (what the keys do), `run_dialogs` (what they open).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import datetime
from functools import partial

from textual import on, work
from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.widgets import Static
from textual.worker import Worker, WorkerState

from loopdeck.core.events import Event
from loopdeck.core.outcome import RunOutcome
from loopdeck.core.runtime import Runtime
from loopdeck.operator.links import RunLink
from loopdeck.operator.runview import RunView
from loopdeck.operator.transcript import Transcript
from loopdeck.tui.approval_offers import ApprovalOffers
from loopdeck.tui.calls_table import CallsTable
from loopdeck.tui.console_failure import OwnDrive
from loopdeck.tui.failures import DRIVE_FAILED, said, say, worker_failed
from loopdeck.tui.frame_pacing import FRAME_INTERVAL_S, FramePacer
from loopdeck.tui.grants_panel import GrantsPanel
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
from loopdeck.tui.run_dialogs import RunDialogsPart
from loopdeck.tui.run_header import MIN_SIZE
from loopdeck.tui.run_panels import PANEL_KEPT, RUNNING
from loopdeck.tui.transcript_view import TranscriptLog, TranscriptScreen

__all__ = ["MIN_SIZE", "PANEL_KEPT", "RUNNING", "RunScreen"]

SPIN_INTERVAL_S = 0.2


class RunScreen(RunDialogsPart):
    is_run_screen = True  # how the app finds a run's screen without importing this module

    HORIZONTAL_BREAKPOINTS = [(0, "-tiny"), (100, "-narrow"), (140, "-wide")]
    VERTICAL_BREAKPOINTS = [(0, "-cramped"), (28, "-short"), (40, "-tall")]

    def __init__(self, link: RunLink, now: Callable[[], datetime]) -> None:
        super().__init__()
        self.link = link
        self.now = now
        self.view = RunView()
        self.transcript = Transcript()
        self.outcome: RunOutcome | None = None
        self.driven = False
        self.quitting = False
        self._buffer: list[Event] = []
        # `flush` looked up at each frame, not bound here: the screen's own, as it is then
        self._pacer = FramePacer(self, link, self._buffer, lambda: self.flush())
        self.offers = ApprovalOffers(
            self, link, now, put_off=self._render_header, asked=self.view.questions.get
        )
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
        yield GrantsPanel(id="grants", classes="panel")
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
        on_failure = getattr(self.link, "on_failure", None)  # an attached run's commands
        if on_failure is not None:
            self._unsubscribe.append(on_failure(partial(say, self, title="run")))
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

    def on_screen_resume(self) -> None:
        """Back from a dialog: the arrows move the Calls selection. Textual gave the focus
        back to the first focusable panel, one that is not even shown while a run is live."""
        focused = self.focused
        if focused is None or not focused.display:
            self.query_one(CallsTable).focus()

    async def on_unmount(self) -> None:
        for unsubscribe in self._unsubscribe:
            unsubscribe()
        close = getattr(self.link, "close", None)
        if close is not None:
            await close()

    # -- the run, in a worker ------------------------------------------------------------
    @work(group="runtime", exclusive=True, exit_on_error=False, description="supervised run")
    async def drive(self) -> RunOutcome | None:
        if self.link.runtime is None:  # another process's run, followed: nothing to finish here
            return await self.link.drive()
        # This console's own run, in a task of its own: Textual cancels every worker as a
        # console that failed goes, and the run must still record its stop then
        # (`console_failure`). A plain exit cancels it as before.
        runtime = self.link.runtime
        driving = asyncio.ensure_future(self.link.drive())
        own_drives = getattr(self.app, "own_drives", None)  # the console's (`ConsoleState`)
        if own_drives is not None:
            own_drives[runtime.config.run_id] = OwnDrive(runtime, driving)
        return await asyncio.shield(driving)

    @on(Worker.StateChanged)
    def _worker_changed(self, event: Worker.StateChanged) -> None:
        if event.worker.group != "runtime":  # a decision's worker: said, never silent
            worker_failed(self, event, title="run")
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
            self.view.stop_detail = said(event.worker.error)
            say(self, self.view.stop_detail, DRIVE_FAILED[self.link.runtime is None], "run crashed")
            self.render_view()
            self.refresh_bindings()
        else:
            return
        if self.quitting:
            self.leave()

    def after_drive(self) -> None:
        """Called once the link's drive finished; a replay starts stepping from here."""
