"""The run screen's state, and its top lines: the header (the run, its clocks, what waits)
and the notice for a terminal too small to show a run.

`RunScreen` is built from one mixin per concern (this one; `run_panels`, the panels drawn
from the view; `run_keys`, what the keys do; `run_dialogs`, what the keys open). Mixins, not
collaborator objects: Textual finds actions, `check_action` and `@on` handlers on the screen
itself, and the per-frame drawing stays plain method calls on one object.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from textual.screen import Screen
from textual.widgets import Static

from loopdeck.core.events import Event
from loopdeck.core.outcome import RunOutcome
from loopdeck.operator import run_waits
from loopdeck.operator.links import RunLink
from loopdeck.operator.runview import RunView
from loopdeck.operator.transcript import Transcript
from loopdeck.tui.approval_offers import ApprovalOffers
from loopdeck.tui.frame_pacing import FramePacer
from loopdeck.tui.panels import RunHeader
from loopdeck.tui.transcript_view import TranscriptScreen

MIN_SIZE = (80, 24)


class RunScreenState(Screen[None]):
    """What every part of the run screen reads; `RunScreen.__init__` sets it."""

    link: RunLink
    now: Callable[[], datetime]
    view: RunView
    transcript: Transcript
    outcome: RunOutcome | None
    driven: bool  # the link's drive has returned (or failed)
    quitting: bool  # leaving once the run has recorded its stop
    offers: ApprovalOffers
    _buffer: list[Event]  # events not yet folded into the view (`flush`)
    _pacer: FramePacer
    _transcript_screen: TranscriptScreen | None
    _frame: int  # the spinner's step
    _unsubscribe: list[Callable[[], None]]

    @property
    def running(self) -> bool:
        return not self.view.finished and not self.driven


class RunHeaderPart(RunScreenState):
    def clock_now(self) -> datetime:
        """The time the screen shows the run at: now, or a replay's current event."""
        return self.now()

    def mark_seen(self) -> None:
        """This run's stop was on screen: the fleet does not mark it unseen (●)."""
        seen: set[str] = getattr(self.app, "seen_runs", set())
        seen.add(self.view.run_id)

    def waiting_for(self) -> str:
        if self.view.run_id:
            return run_waits.waiting_for(self.view)
        return getattr(self.link, "phase", "") or "the run to start"

    def _render_header(self) -> None:
        agent_s, operator_s = self.view.times(self.clock_now())
        pending, questions = len(self.link.pending()), len(self.link.questions())
        by_run: dict[str, int] = getattr(self.app, "waiting_by_run", {})
        elsewhere = sum(n for run_id, n in by_run.items() if run_id != self.view.run_id)
        outage = getattr(self.link, "store_outage", "")  # an attached run's store, unreadable
        outage = outage or self.view.store_outage  # the run holds: its store takes no writes
        self.query_one(RunHeader).show(
            self.view, agent_s, operator_s, pending, self._frame, elsewhere, outage, questions
        )

    def _check_size(self, width: int, height: int) -> None:
        notice = self.query_one("#too-small", Static)
        small = width < MIN_SIZE[0] or height < MIN_SIZE[1]
        notice.display = small
        if small:
            notice.update(
                f"terminal is {width}x{height}: loopdeck needs at least "
                f"{MIN_SIZE[0]}x{MIN_SIZE[1]} to show a run; enlarge it (t opens the transcript)"
            )
