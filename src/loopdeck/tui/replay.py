"""Replaying a finished run: its stored events folded into the console, step by step."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from pathlib import Path

from textual.binding import Binding

from loopdeck.core.approvals import ApprovalRequest
from loopdeck.core.events import EVENT_ADAPTER, EventBase
from loopdeck.core.outcome import RunOutcome
from loopdeck.core.runtime import Runtime
from loopdeck.runview import RunView
from loopdeck.store import queries
from loopdeck.store.database import Store
from loopdeck.tui.calls_table import CallsTable
from loopdeck.tui.links import EventSink, Listener
from loopdeck.tui.run_screen import RunScreen


async def load_events(store: Store, run_id: str) -> list[EventBase]:
    events: list[EventBase] = []
    seq = 0
    while batch := await queries.events_after(store, run_id, seq, limit=20_000):
        events.extend(EVENT_ADAPTER.validate_json(row["body"]) for row in batch)
        seq = batch[-1]["seq"]
    return events


class ReplayLink:
    """A run that is over: nothing to command, everything to read."""

    def __init__(self, db_path: Path | None, run_id: str) -> None:
        self.db_path = db_path
        self.run_id = run_id
        self.runtime: Runtime | None = None
        self.events: list[EventBase] = []

    def subscribe(self, sink: EventSink) -> Callable[[], None]:
        return lambda: None

    def on_approvals(self, listener: Listener) -> Callable[[], None]:
        return lambda: None

    async def drive(self) -> RunOutcome | None:
        store = await Store.open(self.db_path, create=False)
        try:
            await queries.mark_crashed_runners(store)
            self.events = await load_events(store, self.run_id)
        finally:
            await store.close()
        return None

    def pending(self) -> list[ApprovalRequest]:
        return []

    async def decide(self, call_id: str, approved: bool, reason: str, by: str) -> bool:
        return False

    def stop(self, by: str) -> None: ...
    def kill(self, by: str) -> None: ...
    def pause(self, by: str) -> None: ...
    def resume(self, by: str) -> None: ...

    def risk_of(self, tool: str) -> str:
        return "write"


class ReplayScreen(RunScreen):
    BINDINGS = [
        Binding("right", "step(1)", "Step", id="replay.forward", priority=True),
        Binding("left", "step(-1)", "Back", id="replay.back", priority=True),
        Binding("pagedown", "step(100)", "+100", id="replay.forward_many", priority=True),
        Binding("pageup", "step(-100)", "-100", id="replay.back_many", priority=True),
        Binding("home", "jump(0)", "Start", id="replay.start", priority=True),
        Binding("end", "jump(-1)", "End", id="replay.end", priority=True),
    ]

    def __init__(self, link: ReplayLink, now: Callable[[], datetime]) -> None:
        super().__init__(link, now)
        self.replay = link
        self.position = 0

    def after_drive(self) -> None:
        self.jump_to(len(self.replay.events))

    def jump_to(self, position: int) -> None:
        events = self.replay.events
        position = max(0, min(len(events), position))
        if position < self.position:
            self.view = RunView()
            self.query_one(CallsTable).clear()
            start = 0
        else:
            start = self.position
        for event in events[start:position]:
            self.view.apply(event)
        self.position = position
        self.view.stopped_at = self.view.stopped_at or (
            events[position - 1].at if position else None
        )
        self.render_view()
        self.query_one("#calls").border_subtitle = f"replay · event {position} of {len(events)}"

    def action_step(self, delta: int) -> None:
        self.jump_to(self.position + delta)

    def action_jump(self, where: int) -> None:
        self.jump_to(len(self.replay.events) if where < 0 else where)
