"""What waits for the operator across every run in a store: writes waiting for approval
(soonest to expire first), the model's questions, and writes whose outcome is unknown (only
the operator can say whether they took effect), as typed entries, and the operator's
decisions on them: approve (as proposed, edited, or with a standing grant), reject, answer,
resolve an outcome, or message the entry's run.

`Inbox.refresh` reads again only when the store's change counter moved; a store that cannot
be read for now keeps the entries as last read (the next refresh tries again). Reading never
writes: a dead runner's requests stay listed until a follower that looks for crashed runs
(the fleet, an attached console) marks it, and a decision on one is refused meanwhile
(`store/deciding.py`). Every decision goes through `store/deciding.py`, the one path that
waits out a locked store (telling the operator through `tell`) and lets one decision win.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from loopdeck.core.approvals import ApprovalDecision
from loopdeck.core.grant_rules import GrantRule
from loopdeck.core.push_events import Push
from loopdeck.operator import entries, following
from loopdeck.operator.entries import (
    InboxEntry,
    NotOffered,
    PendingOutcome,
    PendingQuestion,
    PendingWrite,
)
from loopdeck.operator.push_words import pushed_notes
from loopdeck.store import deciding, push_queries, queries
from loopdeck.store.base import Location, Store, StoreError, StoreUnavailable

BY = "console inbox"  # who decided, as the store records it
Tell = deciding.Tell
# The entries are the command line's too (`operator/entries.py`): named here for the console.
__all__ = [
    "BY",
    "Inbox",
    "InboxEntry",
    "PendingOutcome",
    "PendingQuestion",
    "PendingWrite",
    "PushMarks",
    "Tell",
    "WaitingCount",
    "read_entries",
]


class PushMarks:
    """What was pushed of each entry (`--notify`), read for the runs that have entries."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.pushes: dict[str, dict[str, Push]] = {}

    async def of(self, run_id: str, call_id: str) -> str:
        if run_id not in self.pushes:
            self.pushes[run_id] = await push_queries.pushes(self.store, run_id)
        push = self.pushes[run_id].get(call_id)
        return pushed_notes(push).get(call_id, "") if push is not None else ""


async def read_entries(store: Store) -> list[InboxEntry]:
    """Every pending write, soonest to expire first, then every question, oldest first, then
    every unknown outcome, oldest first (`operator/entries.py` reads them), each with what
    was pushed of it."""
    pushed, envs = PushMarks(store).of, await entries.run_envs(store)
    writes = await entries.pending_writes(store, envs=envs)
    writes.sort(key=lambda write: write.expires)
    questions = await entries.pending_questions(store, envs=envs)
    outcomes = await entries.unknown_outcomes(store, envs=envs)
    found: list[InboxEntry] = [*writes, *questions, *outcomes]
    return [replace(entry, pushed=await pushed(entry.run_id, entry.call_id)) for entry in found]


@dataclass
class Inbox:
    """The inbox of one console: what waits, as last read, and the store it follows (the
    one its decisions are recorded in)."""

    entries: list[InboxEntry] = field(default_factory=list)
    counter: int = -1  # the store's change counter when the entries were read
    store: Store | None = None  # open while followed

    async def follow(
        self, location: Location | None, stop: asyncio.Event, changed: Callable[[], object]
    ) -> None:
        """Open the store and keep the entries current until `stop` is set; `changed` after
        each read that found something new."""
        async with following.reading(location) as store:
            self.store = store
            try:
                await following.poll(self, store, stop, changed)
            finally:
                self.store = None

    async def refresh(self, store: Store) -> bool:
        counter = await queries.change_counter(store)
        if counter == self.counter:
            return False
        try:
            self.entries = await read_entries(store)
        except StoreUnavailable:
            return False  # kept as last read; the next refresh reads
        self.counter = counter
        return True

    def drop(self, entry: InboxEntry) -> None:
        """A decided entry leaves the inbox before the next read says so."""
        self.entries = [e for e in self.entries if e.key != entry.key]

    async def decide(
        self,
        entry: PendingWrite,
        approved: bool,
        reason: str = "",
        tell: Tell = deciding.untold,
        *,
        args: dict[str, Any] | None = None,
        grant: GrantRule | None = None,
    ) -> bool:
        """True if this decision was the one recorded, False if another came first. A
        rejection's `reason` is what the model reads (the operator's, if none is given). An
        approval may carry the operator's edit of the arguments (`args`) or a standing
        `grant` for later calls."""
        decision = ApprovalDecision(
            call_id=entry.call_id, approved=approved, reason=reason, by=BY, args=args, grant=grant
        )
        asked_at = None if entry.requested is None else entry.requested.isoformat()  # as listed
        return await deciding.decide(
            self._store(), entry.run_id, decision.with_reason(), tell=tell, asked_at=asked_at
        )

    async def resolve(
        self, entry: PendingOutcome, applied: bool, tell: Tell = deciding.untold
    ) -> str | None:
        """The operator's word on an unknown outcome: None when it is the one recorded, else
        why not (another operator said first, the write is not unknown any more)."""
        return await deciding.resolve(
            self._store(), entry.run_id, entry.call_id, applied=applied, by=BY, tell=tell
        )

    async def message(self, entry: InboxEntry, text: str) -> None:
        """The operator's words to the entry's run, heard before its model's next turn;
        refused by name (`deciding.send_message`), nothing recorded, when no runner will."""
        await deciding.send_message(self._store(), entry.run_id, text, BY)

    async def answer(self, entry: PendingQuestion, text: str, tell: Tell = deciding.untold) -> bool:
        """True if this answer was the one recorded, False if the question was answered;
        `NotOffered` (nothing sent) if the question does not take it."""
        if problem := entry.refusal(text):
            raise NotOffered(f"{entry.call_id}: {problem}")
        return await deciding.answer(
            self._store(), entry.run_id, text, BY, question_id=entry.call_id, tell=tell
        )

    def _store(self) -> Store:
        if self.store is None:
            raise StoreError("the inbox is not following a store: nothing was recorded")
        return self.store


@dataclass
class WaitingCount(Inbox):
    """What waits in each run of a store, for a console opened on one run (its header's
    "+N in other runs"). Like the fleet, it looks each second for runs whose runner is gone
    and marks them crashed (their requests would otherwise be counted forever)."""

    crash_checked: float = 0.0  # when runs were last looked at for a dead runner (monotonic)

    async def refresh(self, store: Store) -> bool:
        # The look goes beside the read of what waits (as the fleet's does), not before it: a
        # request is counted after one read, not after that look too. What it marks is read
        # again at once (its own write: the change counter may not move).
        marking: asyncio.Future[bool] | None = None
        if time.monotonic() - self.crash_checked >= following.CRASH_CHECK_S:
            self.crash_checked = time.monotonic()
            marking = asyncio.ensure_future(self._mark_crashed(store))
        try:
            changed = await super().refresh(store)
        finally:
            marked = marking is not None and await marking  # never left in flight
        if marked:
            self.counter = -1
            changed = await super().refresh(store) or changed
        return changed

    @staticmethod
    async def _mark_crashed(store: Store) -> bool:
        """Runs whose runner is gone marked crashed: True if any was. A store unreachable for
        now marks none: the next second tries again."""
        with contextlib.suppress(StoreUnavailable):
            return bool(await queries.mark_crashed_runners(store))
        return False

    @property
    def by_run(self) -> dict[str, int]:
        return dict(Counter(entry.run_id for entry in self.entries))
