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
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, ClassVar

from loopdeck.core.approvals import ApprovalDecision
from loopdeck.core.grant_rules import GrantRule
from loopdeck.core.push_events import DecisionsPushed
from loopdeck.operator import following
from loopdeck.operator.push_words import pushed_notes
from loopdeck.operator.records import NotOffered, not_offered
from loopdeck.store import deciding, outcome_queries, push_queries, queries
from loopdeck.store.base import Location, Store, StoreError, StoreUnavailable

BY = "console inbox"  # who decided, as the store records it
Tell = deciding.Tell


@dataclass(frozen=True)
class PendingWrite:
    """A write of a run that waits for the operator's approval."""

    run_id: str
    call_id: str
    tool: str
    args: dict[str, Any]
    env: str  # "env/script" of its run
    expires: datetime
    rationale: str = ""
    plan_step: str = ""
    asked_again: str = ""
    # The tool's argument schema, from the request: what an edit is checked against.
    args_schema: dict[str, Any] = field(default_factory=dict)
    # Why the call cannot run an edit ("" when it can): an edit is told to the agent instead.
    not_editable: str = ""
    pushed: str = ""  # its push to the operator's channels (`--notify`), "" if none

    @property
    def key(self) -> str:
        return f"{self.run_id}/{self.call_id}"


@dataclass(frozen=True)
class PendingQuestion:
    """A question the run asked the operator; it never expires. `choices`: the answers it
    takes (empty: any words)."""

    run_id: str
    call_id: str  # the question's id
    question: str
    env: str  # "env/script" of its run
    choices: tuple[str, ...] = ()
    pushed: str = ""
    tool: ClassVar[str] = queries.QUESTION
    plan_step: ClassVar[str] = ""

    @property
    def key(self) -> str:
        return f"{self.run_id}/{self.call_id}"

    def refusal(self, text: str) -> str:
        """Why `text` is not an answer this question takes ("" when it is)."""
        return not_offered(self.choices, text)


@dataclass(frozen=True)
class PendingOutcome:
    """An approved write whose outcome nobody knows (it timed out, raised or was cut short):
    the operator says whether it took effect. `live`: its run still goes on."""

    run_id: str
    call_id: str
    tool: str
    args: dict[str, Any]
    env: str  # "env/script" of its run
    live: bool
    pushed: str = ""
    plan_step: ClassVar[str] = ""

    @property
    def key(self) -> str:
        return f"{self.run_id}/{self.call_id}"


InboxEntry = PendingWrite | PendingQuestion | PendingOutcome


class PushMarks:
    """What was pushed of each entry (`--notify`), read for the runs that have entries."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.pushes: dict[str, dict[str, DecisionsPushed]] = {}

    async def of(self, run_id: str, call_id: str) -> str:
        if run_id not in self.pushes:
            self.pushes[run_id] = await push_queries.pushes(self.store, run_id)
        push = self.pushes[run_id].get(call_id)
        return pushed_notes(push).get(call_id, "") if push is not None else ""


async def read_entries(store: Store) -> list[InboxEntry]:
    """Every pending write, soonest to expire first, then every question, oldest first, then
    every unknown outcome, oldest first."""
    runs = {run["run_id"]: run for run in await queries.all_runs(store)}

    def env(run_id: str) -> str:
        run = runs.get(run_id, {})
        return f"{run.get('env') or ''}/{run.get('script') or ''}"

    pushed = PushMarks(store).of

    writes = []
    for item in await queries.pending_approvals(store):
        request = await queries.approval_request(store, item["run_id"], item["call_id"]) or {}
        writes.append(
            PendingWrite(
                run_id=item["run_id"],
                call_id=item["call_id"],
                tool=item["tool"] or "",
                args=item["args"],
                env=env(item["run_id"]),
                expires=datetime.fromisoformat(item["expires_at"]),
                rationale=request.get("rationale") or "",
                plan_step=request.get("plan_step") or "",
                asked_again=request.get("asked_again") or "",
                args_schema=request.get("args_schema") or {},
                not_editable=request.get("not_editable") or "",
                pushed=await pushed(item["run_id"], item["call_id"]),
            )
        )
    writes.sort(key=lambda write: write.expires)
    questions = [
        PendingQuestion(
            run_id=q["run_id"],
            call_id=q["question_id"],
            question=q["question"],
            env=env(q["run_id"]),
            choices=tuple(q["choices"]),
            pushed=await pushed(q["run_id"], q["question_id"]),
        )
        for q in await queries.pending_questions(store)
    ]
    outcomes = [
        PendingOutcome(
            run_id=row["run_id"],
            call_id=row["call_id"],
            tool=row["tool"] or "",
            args=row["args"],
            env=env(row["run_id"]),
            live=row["live"],
            pushed=await pushed(row["run_id"], row["call_id"]),
        )
        for row in await outcome_queries.unknown_outcomes(store)
    ]
    return [*writes, *questions, *outcomes]


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
        return await deciding.decide(self._store(), entry.run_id, decision.with_reason(), tell=tell)

    async def resolve(
        self, entry: PendingOutcome, applied: bool, tell: Tell = deciding.untold
    ) -> str | None:
        """The operator's word on an unknown outcome: None when it is the one recorded, else
        why not (another operator said first, the write is not unknown any more)."""
        return await deciding.resolve(
            self._store(), entry.run_id, entry.call_id, applied=applied, by=BY, tell=tell
        )

    async def message(self, entry: InboxEntry, text: str) -> None:
        """The operator's words to the entry's run, heard before its model's next turn."""
        await queries.send_message(self._store(), entry.run_id, text, BY)

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
        if time.monotonic() - self.crash_checked >= following.CRASH_CHECK_S:
            self.crash_checked = time.monotonic()
            # A store unreachable for now: the next second tries again.
            with contextlib.suppress(StoreUnavailable):
                if await queries.mark_crashed_runners(store):
                    self.counter = -1  # its own write: the change counter may not move
        return await super().refresh(store)

    @property
    def by_run(self) -> dict[str, int]:
        return dict(Counter(entry.run_id for entry in self.entries))
