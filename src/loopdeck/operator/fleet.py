"""Every run in a store at a glance: what each needs from the operator, kept live cheaply.

`Fleet.refresh` asks the store's change counter first; only when something was committed
does it read the change feed (`feed.changes`): the runs whose row changed since its cursor,
each with the summary its writer keeps on it (`store/feed.py`), one query whose cost is what
changed, not the number of runs; and where each submitted run is (queued, held on a host,
parked, its last move), from the leases that changed (`feed.placements_changed`): a queued
run is listed before any worker starts it. Each run read is `touch`ed, and only those runs
are looked at again: their place in the order, what waits in them, their alerts. A question
waits in the same table as a write but never expires: a soonest expiry of never says every
pending one is a question; only a run with several pending and a real expiry is asked which
(`queries.pending_approvals`). No Textual: the console renders rows, tests read them. A
store that cannot be read for now (`StoreUnavailable`) is an `outage` the console shows; the
first refresh that works after it reads every run again: nothing seen before it is trusted.
A runner that died commits nothing, so each second the runs that may have lost theirs are
looked at (marked crashed); nor does a worker killed, so which workers run is read every
`presence.READ_EVERY_S` (`workers_said`).
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from loopdeck.core.text import plural
from loopdeck.operator import following, waking
from loopdeck.operator.fleet_budget import closest_budget
from loopdeck.operator.fleet_order import Order, Sort
from loopdeck.operator.outage import Outage
from loopdeck.store import feed, leases, presence, queries
from loopdeck.store.base import Location, Store, StoreUnavailable

PLACED = leases.LIVE  # a run a worker holds or will: live whatever its runs row says
WAITING = (leases.QUEUED, leases.PARKED)  # a run that waits for a worker to take it up
NEVER = datetime.fromisoformat(queries.QUESTION_NEVER_EXPIRES)  # a question's expiry


def waiting_text(approvals: int, questions: int) -> str:
    """What waits for the operator, each called by its name: "2 approvals, 1 question"."""
    said = [plural(approvals, "approval")] if approvals else []
    if questions:
        said.append(plural(questions, "question"))
    return ", ".join(said)


@dataclass
class FleetRow:
    run_id: str
    env: str
    script: str
    model: str
    state: str
    stop_reason: str | None
    started_at: datetime | None
    pending: int = 0  # approvals and questions waiting
    questions: int = 0  # of those, the questions
    paused: bool = False
    closest: str = ""  # the budget closest to its cap: "tokens 82%"
    closest_fraction: float = 0.0
    projected_s: float | None = None  # at the current rate, seconds until that cap
    last_finding: str = ""
    repeats: int = 0  # calls the guard blocked
    soonest_expiry: datetime | None = None
    seen_seq: int = 0
    runner: str = ""  # host:pid of the process running it
    changed: int = -1  # the row's change number when last read (`store/feed.py`)
    usage: str = ""  # the budget usage it was last read with (JSON)
    # Where a submitted run is (`store/leases.py`; "" for a run of its own process): queued,
    # held, parked or ended, the host of its worker, its last move in words and when.
    placement: str = ""
    placed_on: str = ""
    move: str = ""
    moved_at: float | None = None
    placement_changed: int = -1  # the lease's change number when last read

    @property
    def live(self) -> bool:
        return self.state in queries.LIVE_STATES or self.placement in PLACED

    @property
    def shown_state(self) -> str:
        """The state as the fleet says it: `queued` and `parked` (no worker holds it), a
        claimed run not started yet as `held`, else the run's own (`paused` when so)."""
        if self.placement in WAITING or (self.placement and not self.state):
            return self.placement
        return "paused" if self.paused and self.live else self.state

    @property
    def where(self) -> str:
        """Where it runs: its runner's host and pid, its worker's host before it started;
        nowhere while queued or parked."""
        if self.placement in WAITING:
            return ""
        return self.runner or self.placed_on

    @property
    def approvals(self) -> int:
        return max(0, self.pending - self.questions)

    @property
    def spending(self) -> bool:
        """Its agent spends now: live, and neither waiting on its operator nor left by its
        worker (queued, parked), whose agent clock is held (no cap is coming)."""
        if self.placement in WAITING:
            return False
        return self.live and not self.needs_operator

    @property
    def needs_operator(self) -> str:
        """Why the operator is wanted ("" when not): approval, question, paused."""
        if self.approvals:
            return "approval"
        if self.questions:
            return "question"
        if self.live and self.paused:
            return "paused"
        return ""

    def age_s(self, now: datetime) -> float:
        return 0.0 if self.started_at is None else max(0.0, (now - self.started_at).total_seconds())


class FleetRows(dict[str, FleetRow]):
    """The fleet's rows by run id; a row put in or taken out is said to the fleet (`touch`),
    whoever does it (the feed, a test)."""

    def __init__(self, fleet: Fleet) -> None:
        super().__init__()
        self._fleet = fleet

    def __setitem__(self, run_id: str, row: FleetRow) -> None:
        super().__setitem__(run_id, row)
        self._fleet.touch(run_id)

    def __delitem__(self, run_id: str) -> None:
        super().__delitem__(run_id)
        self._fleet.touch(run_id)


class Fleet:
    """The runs of a store as the console shows them. What a refresh changed is said run by
    run (`touch`: the feed does it for each run it read), and only those runs are looked at
    again: their place in the order (`fleet_order.Order`), what waits in them
    (`waiting_by_run`, `waiting`, `questions`), their alerts (`take_touched`)."""

    def __init__(self, rows: dict[str, FleetRow] | None = None) -> None:
        self.counter = -1
        self.outage = Outage()
        self.crash_checked = 0.0  # when runs were last looked at for a dead runner (monotonic)
        self.cursor = 0  # where the change feed is read from next
        self.last_read = 0  # runs rows the last read of the feed returned
        self.placed_cursor = 0  # where the leases' feed is read from next
        self.last_placed = 0  # leases rows the last read of it returned
        self.unsure: set[str] = set()  # runs whose questions the feed left open
        self.workers_said = ""  # which workers run for the store (`waking.fleet_words`)
        self.workers_read = -math.inf  # when they were last read (monotonic)
        self.rows = rows or {}

    @property
    def rows(self) -> dict[str, FleetRow]:
        return self._rows

    @rows.setter
    def rows(self, rows: dict[str, FleetRow]) -> None:
        """Every run anew: the order and the counts made again from them."""
        self._rows = FleetRows(self)
        self._seq: dict[str, int] = {}  # each run's first sight, in the rows' own order
        self._next_seq = 0
        self._order: Order[FleetRow] | None = None
        self._unsettled: set[str] = set()  # touched since the order and counts were kept
        self._unalerted: set[str] = set()  # touched since the alerts looked
        self._pending: dict[str, tuple[int, int]] = {}  # (pending, questions) of each run
        self._waiting = self._questions = 0
        for run_id, row in rows.items():
            self._rows[run_id] = row

    def touch(self, run_id: str) -> None:
        """The run's row was put in, changed or taken out: looked at again next time."""
        if run_id not in self._rows:
            self._seq.pop(run_id, None)
        elif run_id not in self._seq:
            self._seq[run_id] = self._next_seq
            self._next_seq += 1
        self._unsettled.add(run_id)
        self._unalerted.add(run_id)

    def take_touched(self) -> set[str]:
        """The runs touched since the last call (the alerts look at those)."""
        touched, self._unalerted = self._unalerted, set()
        return touched

    def _settle(self) -> None:
        """The order and the counts brought up to the runs touched since last time."""
        if not self._unsettled:
            return
        touched, self._unsettled = self._unsettled, set()
        for run_id in touched:
            row = self._rows.get(run_id)
            was = self._pending.pop(run_id, (0, 0))
            self._waiting -= was[0]
            self._questions -= was[1]
            if row is None:
                if self._order is not None:
                    self._order.drop(run_id)
                continue
            if row.pending:
                self._pending[run_id] = (row.pending, row.questions)
                self._waiting += row.pending
                self._questions += row.questions
            if self._order is not None:
                self._order.put(row, self._seq[run_id])

    @property
    def waiting(self) -> int:
        """Approvals and questions waiting, in every run."""
        self._settle()
        return self._waiting

    @property
    def questions(self) -> int:
        self._settle()
        return self._questions

    @property
    def waiting_by_run(self) -> dict[str, int]:
        """What waits in each run that has something waiting: as many entries as those."""
        self._settle()
        return {run_id: pending for run_id, (pending, _) in self._pending.items()}

    def ordered(self, sort: Sort = "needs you") -> Order[FleetRow]:
        """Every run, newest first, the runs that need the operator before the others in
        every order (the console keeps them in view); with `needs you` the live ones next;
        with `env`, by env and script. Kept from one call to the next: a call costs the runs
        touched since; another sort than last time's orders them all once."""
        self._settle()
        if self._order is None or self._order.sort != sort:
            self._order = Order(sort)
            for run_id, row in self._rows.items():
                self._order.put(row, self._seq[run_id])
        return self._order

    async def follow(
        self, location: Location | None, stop: asyncio.Event, changed: Callable[[], object]
    ) -> None:
        """Open the store and keep the rows current until `stop` is set; `changed` after
        each refresh that changed something."""
        async with following.reading(location) as store:
            await following.poll(self, store, stop, changed)

    async def refresh(self, store: Store) -> bool:
        """True when anything changed since the last refresh (an outage starting or ending
        counts). While the store cannot be read the rows stay as last read, and every one is
        read again once it can."""
        try:
            changed = await self._refresh(store)
        except StoreUnavailable as exc:
            self.counter, self.cursor, self.placed_cursor = -1, 0, 0
            for row in self.rows.values():
                row.changed = row.placement_changed = -1
            return self.outage.failed(exc)
        return self.outage.recovered() or changed

    async def _refresh(self, store: Store) -> bool:
        counter = await queries.change_counter(store)
        # A dead runner says nothing: the runs that may have lost theirs, once a second,
        # looked for beside the read of what changed (on another connection), not before it:
        # a commit is shown after one round trip, not two. What it marks is read at once.
        marking: asyncio.Future[list[str]] | None = None
        if time.monotonic() - self.crash_checked >= following.CRASH_CHECK_S:
            self.crash_checked = time.monotonic()
            marking = asyncio.ensure_future(queries.mark_crashed_runners(store))
        try:
            changed = counter != self.counter and await self._read(store, counter)
        finally:
            marked = [] if marking is None else await marking  # never left in flight
        if marked:
            changed = await self._read(store, counter) or changed
        if time.monotonic() - self.workers_read >= presence.READ_EVERY_S:
            self.workers_read, now = time.monotonic(), time.time()
            waiting = any(row.placement in WAITING for row in self.rows.values())
            said = waking.fleet_words(await presence.seen(store, now), now, waiting)
            changed, self.workers_said = changed or said != self.workers_said, said
        return changed

    async def _read(self, store: Store, counter: int) -> bool:
        """The runs and placements changed since the last read (`feed.changes`)."""
        self.counter = counter
        found = await feed.changes(store, self.cursor, self.placed_cursor)
        self.cursor, self.placed_cursor = found.runs_after, found.placements_after
        self.last_read, self.last_placed = len(found.runs), len(found.placements)
        changed = False
        for run in found.runs:
            changed = self._take(run) or changed
        for lease in found.placements:
            changed = self._place(lease) or changed
        for run_id in list(self.unsure):  # kept until read: an outage leaves them for later
            row = self.rows[run_id]
            writes = await queries.pending_approvals(store, run_id)
            row.questions = max(0, row.pending - len(writes))
            self.unsure.discard(run_id)
            self.touch(run_id)
        return changed

    def _take(self, run: dict[str, Any]) -> bool:
        """One run's row from the feed; False when it is the one already held."""
        row = self.rows.get(run["run_id"])
        if row is None:
            row = self.rows[run["run_id"]] = FleetRow(
                run_id=run["run_id"],
                env=run["env"] or "",
                script=run["script"] or "",
                model=run["model"] or "",
                state=run["state"] or "",
                stop_reason=run["stop_reason"],
                started_at=_when(run["started_at"]),
            )
        elif row.changed == run["changed"]:
            return False  # read again only because an older transaction was still open
        row.changed = run["changed"]
        row.env, row.script, row.model = run["env"] or "", run["script"] or "", run["model"] or ""
        row.started_at = _when(run["started_at"])
        row.state, row.stop_reason = run["state"] or "", run["stop_reason"]
        row.runner = f"{run['host']}:{run['pid']}" if run["host"] else ""
        before = (row.pending, row.soonest_expiry)
        row.pending = int(run["pending"] or 0)
        row.soonest_expiry = _when(run["soonest_expiry"]) if row.pending else None
        told = _questions_told(row.pending, row.soonest_expiry)
        if told is not None:
            row.questions = told
            self.unsure.discard(row.run_id)
        elif (row.pending, row.soonest_expiry) != before:
            self.unsure.add(row.run_id)
        row.seen_seq = int(run["last_seq"] or 0)
        row.last_finding = run["last_finding"] or ""
        row.paused = row.live and bool(run["paused"])
        row.repeats = int(run["guard_repeats"] or 0)
        usage = run["usage"] or ""
        if usage != row.usage:
            row.usage = usage
            row.closest, row.closest_fraction, row.projected_s = closest_budget(json.loads(usage))
        self.touch(row.run_id)
        return True

    def _place(self, lease: dict[str, Any]) -> bool:
        """Where one submitted run is, from the leases' feed; a run queued and not started
        yet is listed from it alone (its env, script and model as submitted)."""
        run_id = lease["run_id"]
        row = self.rows.get(run_id)
        if row is None:
            options = json.loads(lease["options"] or "{}")
            submitted_at = float(lease["submitted_at"] or 0)
            row = self.rows[run_id] = FleetRow(
                run_id=run_id,
                env=Path(str(options.get("env") or "")).name,
                script=str(options.get("script") or ""),
                model=str(options.get("model") or ""),
                state="",
                stop_reason=None,
                started_at=datetime.fromtimestamp(submitted_at, UTC) if submitted_at else None,
            )
        elif row.placement_changed == lease["changed"]:
            return False  # read again only because an older transaction was still open
        row.placement_changed = lease["changed"]
        row.placement, row.placed_on = str(lease["state"] or ""), str(lease["host"] or "")
        row.move = str(lease["note"] or "")
        row.moved_at = None if lease["moved_at"] is None else float(lease["moved_at"])
        self.touch(run_id)
        return True


def _questions_told(pending: int, soonest: datetime | None) -> int | None:
    """How many of a run's pending are questions, when the feed says it: all of them when the
    soonest expires never, none when the one pending expires; None: ask the store."""
    if soonest == NEVER:
        return pending
    if pending <= 1:
        return 0
    return None


def _when(stamp: str | None) -> datetime | None:
    if not stamp:
        return None
    try:
        return datetime.fromisoformat(stamp)
    except ValueError:
        return None
