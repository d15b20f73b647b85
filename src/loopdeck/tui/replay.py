"""Replaying a finished run: its stored events folded into the console, step by step."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from textual.binding import Binding

from loopdeck.operator.links import ReplayLink
from loopdeck.operator.runview import RunView
from loopdeck.operator.transcript import Transcript
from loopdeck.tui.calls_table import CallsTable
from loopdeck.tui.console_messages import RunLeft
from loopdeck.tui.run_screen import RunScreen
from loopdeck.tui.shared_state import SharedState
from loopdeck.tui.transcript_view import TranscriptLog


class ReplayScreen(RunScreen):
    BINDINGS = [
        Binding("right", "step(1)", "Step", id="replay.forward", priority=True),
        Binding("left", "step(-1)", "Back", id="replay.back", priority=True),
        Binding("pagedown", "step(100)", "+100", id="replay.forward_many", priority=True),
        Binding("pageup", "step(-100)", "-100", id="replay.back_many", priority=True),
        Binding("home", "jump(0)", "Start", id="replay.start", priority=True),
        Binding("end", "jump(-1)", "End", id="replay.end", priority=True),
    ]

    def __init__(self, link: ReplayLink, now: Callable[[], datetime], shared: SharedState) -> None:
        super().__init__(link, now, shared)
        self.replay = link
        self.position = 0

    def after_drive(self) -> None:
        self.jump_to(len(self.replay.events))

    def clock_now(self) -> datetime:
        """The run as of the event on screen: its time, its budgets."""
        events = self.replay.events
        if self.position and events:
            return events[self.position - 1].at
        return self.now()

    def jump_to(self, position: int) -> None:
        """Show the run as it stood after event `position` (the first event at least: the
        header is never empty)."""
        events = self.replay.events
        position = max(min(1, len(events)), min(len(events), position))
        if position < self.position:
            self.view = RunView()
            self.transcript = Transcript()
            self.query_one(CallsTable).clear()
            self.query_one(TranscriptLog).clear()
            start = 0
        else:
            start = self.position
        entries = []
        for event in events[start:position]:
            self.view.apply(event)
            if entry := self.transcript.apply(event):
                entries.append(entry)
        self.position = position
        self.panels.feed_transcript(entries)
        self.render_view()
        subtitle = "replay · no events"
        if position:
            event = events[position - 1]
            stamp = event.at.astimezone().strftime("%H:%M:%S.%f")[:-3]
            subtitle = f"replay · event {position} of {len(events)} · {event.kind} · {stamp}"
        self.query_one("#calls").border_subtitle = subtitle

    def leave(self) -> None:
        """The farewell says how the run ended, wherever the replay stood (at its start the
        view's state was the first event's, `ready`)."""
        whole = RunView()
        for event in self.replay.events:
            whole.apply(event)
        self.flush()
        self.post_message(RunLeft(self, whole))

    def action_step(self, delta: int) -> None:
        self.jump_to(self.position + delta)

    def action_jump(self, where: int) -> None:
        self.jump_to(len(self.replay.events) if where < 0 else where)
