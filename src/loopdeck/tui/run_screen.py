"""The main screen: one run, side by side, with the kill switch and the approval queue (under
80x24, a phone's, one column: `phone_panels`).

`RunScreen` holds the run: its link, the view and the transcript its events are folded into
(at most once a frame, `FramePacer`), how its drive ended. It composes the panels, drives the
run in a worker and binds the run's keys. Each other concern is a part it holds, not a class
it inherits: `RunPanels` (`run_panels`: the panels, the header and the transcript, drawn from
the view), `ApprovalOffers` (the approval and question dialogs, one at a time) and
`RunDecisions` (`o` and `G`). Textual finds actions, `check_action` and `@on` handlers on the
screen itself: they stay here, and hand over to the part.

What the screen asks of the console is a message (`console_messages`: back to the fleet, done
with this run); what it reads and records of it is `SharedState`, given when it is made.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from datetime import datetime
from functools import partial

from textual import events, on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.reactive import Reactive
from textual.screen import Screen
from textual.widget import Widget
from textual.worker import Worker, WorkerState

from loopdeck.core.events import Event
from loopdeck.core.outcome import RunOutcome
from loopdeck.core.runtime import Runtime
from loopdeck.operator.links import RunLink
from loopdeck.operator.runview import RunView
from loopdeck.operator.transcript import Entry, Transcript
from loopdeck.tui import link_facets
from loopdeck.tui.approval_offers import ApprovalOffers, ApprovalsChanged
from loopdeck.tui.calls_table import CallsTable
from loopdeck.tui.console_messages import BackToFleet, RunLeft
from loopdeck.tui.dialogs import BY, ConfirmKillDialog, ConfirmQuitDialog
from loopdeck.tui.failures import DRIVE_FAILED, said, say, worker_failed
from loopdeck.tui.frame_pacing import FRAME_INTERVAL_S, FramePacer
from loopdeck.tui.message_dialog import MessageDialog, unheard
from loopdeck.tui.panels import PlanPanel
from loopdeck.tui.run_decisions import RunDecisions
from loopdeck.tui.run_panels import RunPanels, composed
from loopdeck.tui.shared_state import OwnDrive, SharedState
from loopdeck.tui.shown import toast
from loopdeck.tui.timers import every, unless_gone

SPIN_INTERVAL_S = 0.2


class RunScreen(Screen[None]):
    # Textual repaints the whole screen when the focus moves; the two panels it moves between
    # repaint themselves (their `:focus` style), and nothing else of this screen shows it.
    focused: Reactive[Widget | None] = Reactive(None, repaint=False)
    HORIZONTAL_BREAKPOINTS = [(0, "-tiny"), (100, "-narrow"), (140, "-wide")]
    # `-short` from 30 rows: its panels with a Grants or a Stopped panel take 30 (`grants_room`).
    VERTICAL_BREAKPOINTS = [(0, "-cramped"), (30, "-short"), (40, "-tall")]
    # The kill switch itself (`s`, `k`, `p`, `q`) is bound on the app, over any dialog, and
    # lands here (`action_stop`, `action_kill`, `action_pause`, `action_quit_run`).
    BINDINGS = [
        # The narrow layout's first keys while a write waits: its dialog, opened to decide.
        Binding("a", "decide(True)", "Approve…", id="run.approve"),
        Binding("r", "decide(False)", "Reject…", id="run.reject"),
        Binding("w", "approvals", "Approvals", id="run.approvals"),
        Binding("t", "transcript", "Transcript", id="run.transcript"),
        Binding("m", "message", "Message", id="run.message"),
        # `m` on a run that has ended still opens its box (marked so): the letters typed next
        # are typed there, never taken as the run's keys.
        Binding("m", "message_ended", "Message", id="run.message_ended", show=False),
        Binding("escape", "back", "Fleet", id="run.back"),
        Binding("left_square_bracket", "plan(-1)", "Prev plan", id="plan.prev", show=False),
        Binding("right_square_bracket", "plan(1)", "Next plan", id="plan.next", show=False),
        Binding("o", "outcome", "Outcome?", id="run.outcome"),
        Binding("G", "revoke", "Revoke grant", id="run.revoke"),
        Binding("f", "fork", "Fork", id="run.fork"),
    ]

    def __init__(self, link: RunLink, now: Callable[[], datetime], shared: SharedState) -> None:
        """`shared` is the console's (`ConsoleState.shared`): what waits in other runs, the
        runs looked at, this console's own drives."""
        super().__init__()
        self.link = link
        self.now = now
        self.shared = shared
        self.view = RunView()
        self.transcript = Transcript()
        self.outcome: RunOutcome | None = None
        self.driven = False  # the link's drive has returned (or failed)
        self.quitting = False  # leaving once the run has recorded its stop
        self._buffer: list[Event] = []  # events not yet folded into the view (`flush`)
        self._pacer = FramePacer(
            self, self._buffer, self._frame, partial(link_facets.reading_history, link)
        )
        self.panels = RunPanels(self, link, self.shared)
        self.offers = ApprovalOffers(
            self, link, now, put_off=self._show_header, asked=self.view.questions.get
        )
        self.decisions = RunDecisions(self, link, self.offers)
        self._unsubscribe: list[Callable[[], None]] = []
        self.message_box: MessageDialog | None = None  # `m`'s, once opened

    @property
    def running(self) -> bool:
        return not self.view.finished and not self.driven

    @property
    def runtime(self) -> Runtime:
        """The in-process runtime (local runs only)."""
        assert self.link.runtime is not None
        return self.link.runtime

    def clock_now(self) -> datetime:
        """The time the screen shows the run at: now, or a replay's current event."""
        return self.now()

    def compose(self) -> ComposeResult:
        yield from composed()

    def on_mount(self) -> None:
        # Quitting as the screen is pushed: the app can remove its panels before this runs
        # (or its resume, its resize); a screen torn down so starts nothing (`unless_gone`).
        unless_gone(self, self._mounted)

    def _mounted(self) -> None:
        self.panels.titled()
        self._unsubscribe.append(self.link.subscribe(self._buffer.append))
        link_facets.folds(self.link)  # `flush` says when it folded what arrived
        self._unsubscribe.append(self.link.on_approvals(self._queue_changed))
        told = link_facets.on_failure(
            self.link, partial(say, self, title="run"), partial(toast, self, title="run")
        )
        if told is not None:  # a local run's recording, an attached run's commands
            self._unsubscribe.append(told)
        self.app.theme_changed_signal.subscribe(
            self, lambda _: self.query_one(CallsTable).restyle(self.view)
        )
        every(self, FRAME_INTERVAL_S, self._pacer.due)
        every(self, SPIN_INTERVAL_S, self._tick)
        self.panels.check_size(self.size.width, self.size.height)
        self.render_view()
        # The run starts once its screen is painted: the operator sees it before the agent
        # acts, and the first events do not wait behind the mount's layout.
        self.call_after_refresh(self.drive)

    def on_screen_resume(self) -> None:
        unless_gone(self, self.panels.calls_focused)
        # On top again (a dialog, the keys, the inbox gone): what waits and was not put off
        # is offered now; asked while another screen was on top, it was not offered then.
        unless_gone(self, self.offers.offer_next)

    async def on_unmount(self) -> None:
        for unsubscribe in self._unsubscribe:
            unsubscribe()
        await link_facets.close(self.link)

    def on_resize(self, event: events.Resize) -> None:
        width, height = event.size
        unless_gone(self, partial(self.panels.fit, width, height, self.view, self.clock_now))

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
        self.shared.own_drives[runtime.config.run_id] = OwnDrive(runtime, driving)
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
        unheard(self.message_box, ended=True)
        if self.quitting:
            self.leave()

    def after_drive(self) -> None:
        """Called once the link's drive finished; a replay starts stepping from here."""

    # -- what arrives, drawn ---------------------------------------------------------------
    def _queue_changed(self) -> None:
        self.post_message(ApprovalsChanged())

    @on(ApprovalsChanged)
    def _approvals_changed(self) -> None:
        self.flush()
        self._show_header()
        self.refresh_bindings()
        self.offers.changed(self.view)

    @property
    def arrived(self) -> Sequence[Event]:
        """The events that arrived and are not yet folded into the view (the next frame's)."""
        return self._buffer

    def _frame(self) -> None:
        """A frame the pacer draws: what the run told and is still on its way is heard first,
        so the frame shows it too, not a delivery later. `flush` is looked up at each frame,
        not bound: the screen's own, as it is then."""
        link_facets.hear_now(self.link)
        self.flush()

    def flush(self) -> None:
        """Fold what arrived into the view and the transcript, and draw it (`FramePacer`)."""
        if not self._buffer:
            return
        self._pacer.begun()
        self._fold()
        self.render_view()
        # After the events folded are gone: a collection held back by a long history's read
        # walks the view, not them.
        link_facets.folded(self.link)

    def _fold(self) -> None:
        events, self._buffer[:] = list(self._buffer), []
        entries: list[Entry] = []
        for event in events:
            self.view.apply(event)
            if entry := self.transcript.apply(event):
                entries.append(entry)
        self.panels.feed_transcript(entries)

    def render_view(self) -> None:
        """Every panel from the view; the keys that come and go with it told."""
        self.panels.show(self.view, self.clock_now())
        if self.view.finished:
            self.refresh_bindings()
            if self.app.screen is self:
                self.mark_seen()
        self.decisions.drawn(self.view)
        self.offers.drawn(self.view)

    def _show_header(self) -> None:
        self.panels.show_header(self.view, self.clock_now())

    def _tick(self) -> None:
        self.panels.tick(self.view, self.clock_now(), frame_due=bool(self.arrived))

    def show_detail(self, call_id: str | None) -> None:
        """The call in the Call panel."""
        self.panels.show_detail(self.view, call_id)

    @on(CallsTable.Highlighted, "#calls")
    def _show_call(self, event: CallsTable.Highlighted) -> None:
        self.show_detail(event.call_id)

    def mark_seen(self) -> None:
        """This run's stop was on screen: the fleet does not mark it unseen (●)."""
        self.shared.seen_runs.add(self.view.run_id)

    # -- the keys --------------------------------------------------------------------------
    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        live = self.running and not self.quitting
        if action == "outcome":
            return self.decisions.can_resolve(self.view)
        if action == "revoke":
            return live and self.decisions.can_revoke(self.view)
        if action == "approvals":
            return bool(self.link.pending() or self.link.questions())
        if action == "decide":
            return self.panels.phone and bool(self.link.pending()) and not self.quitting
        if action == "back":
            return self.shared.fleet_home
        if action == "message":
            return live
        if action == "message_ended":
            return not live
        if action == "fork":
            return self.decisions.can_fork(self.view)
        return True

    def action_approvals(self) -> None:
        self.offers.reopen()

    def action_decide(self, approve: bool) -> None:
        """`a`, `r` in the narrow layout: the first write waiting, in its dialog (all of its
        evidence, its arguments whole), where `a` approves; `r` opens its reason box too."""
        self.offers.open_write(reject=not approve)

    def action_transcript(self) -> None:
        if self.panels.full_transcript is None:
            self.flush()
            self.panels.open_transcript(self.transcript, self.view.run_id)

    def action_outcome(self) -> None:
        self.decisions.ask_outcome(self.view)

    def action_revoke(self) -> None:
        self.decisions.ask_revoke(self.view)

    def action_fork(self) -> None:
        """`f`: fork the run at the selected call (`RunDecisions.ask_fork`)."""
        self.decisions.ask_fork(self.view)

    def action_plan(self, delta: int) -> None:
        self.query_one(PlanPanel).browse(self.view, delta)

    def action_back(self) -> None:
        if self.view.finished:  # left after its stop was on screen
            self.mark_seen()
        self.post_message(BackToFleet())

    def action_message(self, ended: bool = False) -> None:
        """`m`: a box for the operator's words; sent to the run, heard before its next turn.
        On a run that has ended the box still opens, marked so (`message_ended`)."""
        if ended:
            toast(self, "the run has ended: nobody is left to hear a message", title="not sent")

        def typed(text: str | None) -> None:
            if text is None:
                return
            if not self.running:
                toast(self, "the run has stopped: nobody is left to hear it", title="not sent")
                return
            self.link.message(text, by=BY)
            if not link_facets.tells_what_came(self.link):  # an attached run's says it landed
                self.notify("message sent: the model hears it before its next turn")

        self.message_box = MessageDialog(self.view.run_id, ended)
        self.app.push_screen(self.message_box, typed)

    def action_message_ended(self) -> None:
        self.action_message(ended=True)

    def action_stop(self) -> None:
        self.link.stop(by="console")
        if not link_facets.tells_what_came(self.link):
            self.notify("stopping after the current tools")
        unheard(self.message_box)

    def action_pause(self) -> None:
        self.decisions.pause_or_resume(self.view)

    def action_kill(self) -> None:
        def confirmed(yes: bool | None) -> None:
            if yes:
                self.link.kill(by="console")
                unheard(self.message_box)

        self.app.push_screen(ConfirmKillDialog(), confirmed)

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
        """Done with this run: the console takes it from here (`RunLeft`)."""
        self.flush()
        self.post_message(RunLeft(self, self.view))
