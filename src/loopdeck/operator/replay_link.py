"""A finished run's stored events, read back: `parse_rows` (one validation a batch, also for
`StoreLink`), `load_events`, and `ReplayLink`, the console's link to a run that is over."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from loopdeck.core.approvals import ApprovalDecision, ApprovalRequest
from loopdeck.core.events import EVENT_ADAPTER, EVENTS_ADAPTER, Event
from loopdeck.core.outcome import RunOutcome
from loopdeck.core.runtime import Runtime
from loopdeck.store import deciding, queries
from loopdeck.store.base import Location, Store
from loopdeck.store.opening import open_store
from loopdeck.tuning import collector

Listener = Callable[[], None]  # as in links.py (which imports this module)
EventSink = Callable[[Event], None]
Tell = deciding.Tell


async def load_events(store: Store, run_id: str) -> list[Event]:
    events: list[Event] = []
    seq = 0
    while batch := await queries.events_after(store, run_id, seq, limit=20_000):
        events.extend(parse_rows(batch))
        seq = batch[-1]["seq"]
    return events


BODY = 2  # events_after's rows: (seq, kind, body)


def parse_rows(rows: list[Any]) -> list[Event]:
    """Stored rows as events: one validation for the whole batch (a fifth faster than one per
    row), with the collector paused. Parsing makes only acyclic objects, yet each one counts
    towards a collection that walks everything alive: 70 % of a 100,000-event load."""
    with collector.held():
        return parse_held(rows)


def parse_held(rows: list[Any]) -> list[Event]:
    """`parse_rows` for a caller that holds the collector already (`StoreLink` while it reads
    full batches): a hold taken inside another is an overlap, and overlapping holds older than
    `collector.MAX_HELD_S` collect the young generations, all the history parsed so far
    (a tenth of a loaded machine's 100,000-event load)."""
    try:
        return list(EVENTS_ADAPTER.validate_json(f"[{','.join(r[BODY] for r in rows)}]"))
    except ValueError:  # a row that does not parse: parse row by row, to name it
        return [EVENT_ADAPTER.validate_json(row[BODY]) for row in rows]


class ReplayLink:
    """A run that is over: nothing to command, everything to read."""

    def __init__(self, db_path: Location | None, run_id: str) -> None:
        self.db_path = db_path
        self.run_id = run_id
        self.runtime: Runtime | None = None
        self.events: list[Event] = []

    def subscribe(self, sink: EventSink) -> Callable[[], None]:
        return lambda: None

    def on_approvals(self, listener: Listener) -> Callable[[], None]:
        return lambda: None

    async def drive(self) -> RunOutcome | None:
        store = await open_store(self.db_path, create=False)
        try:
            await queries.mark_crashed_runners(store)
            self.events = await load_events(store, self.run_id)
        finally:
            await store.close()
        return None

    def pending(self) -> list[ApprovalRequest]:
        return []

    async def decide(self, decision: ApprovalDecision, tell: Tell = deciding.untold) -> bool:
        return False

    def questions(self) -> list[tuple[str, str]]:
        return []

    async def answer(
        self, question_id: str, text: str, by: str, tell: Tell = deciding.untold
    ) -> bool:
        return False

    def stop(self, by: str) -> None: ...
    def kill(self, by: str) -> None: ...
    def pause(self, by: str) -> None: ...
    def resume(self, by: str) -> None: ...

    async def pause_or_resume(self, verb: str, by: str, tell: Tell = deciding.untold) -> str | None:
        return f"the run is over: nothing to {verb}"

    def message(self, text: str, by: str) -> None: ...

    async def revoke(self, grant_id: str, by: str) -> str | None:
        return "the run is over: its grants ended with it"

    async def resolve(
        self, call_id: str, applied: bool, by: str, tell: Tell = deciding.untold
    ) -> str | None:
        return "a replay only reads: resolve it with `loopdeck resolve`"

    def risk_of(self, tool: str) -> str:
        return "write"
