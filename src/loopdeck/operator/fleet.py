"""Every run in a store at a glance: what each needs from the operator, kept live cheaply.

`Fleet.refresh` asks the store's change counter first; only when something was committed does
it read the change feed: the runs whose row changed since its cursor, each with the summary
its writer keeps on it (`store/feed.py`), one query whose cost is what changed, not the
number of runs. A question waits in the same table as a write but never expires: a soonest
expiry of never says every pending one is a question; only a run with several pending and a
real expiry is asked which (`queries.pending_approvals`). No Textual: the console renders
rows, tests read them. A store that cannot be
read for now (`StoreUnavailable`) is an `outage` the console shows; the first refresh that
works after it reads every run again: nothing seen before it is trusted. A runner that died
commits nothing, so each second the runs that may have lost theirs are looked at (marked
crashed).
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from loopdeck.core.text import plural
from loopdeck.operator import following
from loopdeck.operator.outage import Outage
from loopdeck.store import queries
from loopdeck.store.base import Location, Store, StoreUnavailable

CAP_LABELS = {
    "turns": "turns",
    "tool_calls": "tool calls",
    "tokens": "tokens",
    "cost_usd": "cost",
    "deadline_s": "time",
}
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

    @property
    def live(self) -> bool:
        return self.state in queries.LIVE_STATES

    @property
    def approvals(self) -> int:
        return max(0, self.pending - self.questions)

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


def closest_budget(usage: dict[str, Any]) -> tuple[str, float, float | None]:
    """The cap nearest its limit, its fraction, and the agent seconds left to reach it at the
    run's average rate so far (None when nothing is being spent). Only the caps a run spends
    (`CAP_LABELS`): rounds and corrections are counted steps, not spent, as the budget pause
    has them (`BudgetLedger.crossed`): every run's first round read "rounds 33%", above what
    it had spent. A cap is read only as (used, limit) with a positive limit: a missing or
    zero cap, or a value that is not a number, is left out, never a fraction of anything."""
    agent_s = _spent(usage.get("deadline_s"))[0]
    best, best_fraction, projected = "", 0.0, None
    for cap, label in CAP_LABELS.items():
        used, limit = _spent(usage.get(cap))
        if limit <= 0:
            continue
        fraction = used / limit
        if fraction >= best_fraction and (used or cap == "deadline_s"):
            best, best_fraction = f"{label} {fraction:.0%}", fraction
            rate = used / agent_s if agent_s > 0 else 0.0
            projected = (limit - used) / rate if rate > 0 else None
    return best, best_fraction, projected


def _spent(pair: Any) -> tuple[float, float]:
    """A cap's (used, limit) as the budget event has it; (0, 0) when it is not one."""
    try:
        used, limit = (float(x) for x in pair)
    except (TypeError, ValueError):
        return 0.0, 0.0
    if not (math.isfinite(used) and math.isfinite(limit)) or used < 0:
        return 0.0, 0.0
    return used, limit


# How the fleet's runs are ordered, each with its words; `s` goes to the next.
Sort = Literal["needs you", "newest", "env"]
SORTS: dict[Sort, str] = {"needs you": "needs you first", "newest": "newest first", "env": "by env"}


@dataclass
class Fleet:
    rows: dict[str, FleetRow] = field(default_factory=dict)
    counter: int = -1
    outage: Outage = field(default_factory=Outage)
    crash_checked: float = 0.0  # when runs were last looked at for a dead runner (monotonic)
    cursor: int = 0  # where the change feed is read from next
    last_read: int = 0  # runs rows the last read of the feed returned
    unsure: set[str] = field(default_factory=set)  # runs whose questions the feed left open

    @property
    def waiting(self) -> int:
        """Approvals and questions waiting, in every run."""
        return sum(row.pending for row in self.rows.values())

    @property
    def questions(self) -> int:
        return sum(row.questions for row in self.rows.values())

    def ordered(self, sort: Sort = "needs you") -> list[FleetRow]:
        """Every run, newest first, the runs that need the operator before the others in
        every order (the console keeps them in view); with `needs you` the live ones next;
        with `env`, by env and script."""
        epoch = datetime.min.replace(tzinfo=UTC)
        rows = sorted(self.rows.values(), key=lambda row: row.started_at or epoch, reverse=True)
        if sort == "needs you":
            rows.sort(key=lambda row: (not row.needs_operator, not row.live))
        else:
            if sort == "env":
                rows.sort(key=lambda row: (row.env, row.script))
            rows.sort(key=lambda row: not row.needs_operator)
        return rows

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
            self.counter, self.cursor = -1, 0
            for row in self.rows.values():
                row.changed = -1
            return self.outage.failed(exc)
        return self.outage.recovered() or changed

    async def _refresh(self, store: Store) -> bool:
        counter = await queries.change_counter(store)
        marked: list[str] = []
        # A dead runner says nothing: the runs that may have lost theirs, once a second.
        if time.monotonic() - self.crash_checked >= following.CRASH_CHECK_S:
            self.crash_checked = time.monotonic()
            marked = await queries.mark_crashed_runners(store)  # listings never mark
        if counter == self.counter and not marked:
            return False
        self.counter = counter
        runs, self.cursor = await queries.changed_runs(store, self.cursor)
        self.last_read = len(runs)
        changed = False
        for run in runs:
            changed = self._take(run) or changed
        for run_id in list(self.unsure):  # kept until read: an outage leaves them for later
            row = self.rows[run_id]
            writes = await queries.pending_approvals(store, run_id)
            row.questions = max(0, row.pending - len(writes))
            self.unsure.discard(run_id)
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


@dataclass(frozen=True)
class Alert:
    run_id: str
    text: str
    severity: str = "warning"


@dataclass
class Alerts:
    """What is worth interrupting the operator for, each said once: a run starts waiting for
    you, a receipt has under 30 s left, the guard blocks a repeat, a budget passes 80 %, a
    run stops."""

    said: set[tuple[str, str]] = field(default_factory=set)
    seen: dict[str, tuple[int, int, int, bool, bool]] = field(default_factory=dict)

    def check(self, fleet: Fleet, now: datetime) -> list[Alert]:
        alerts = []
        for row in fleet.rows.values():
            before = self.seen.get(row.run_id)
            high = row.closest_fraction >= 0.8
            self.seen[row.run_id] = (row.approvals, row.questions, row.repeats, row.live, high)
            if before is None:
                if row.live:
                    alerts.extend(_asks(row, row.approvals, row.questions))
                continue
            approvals, questions, repeats, live, was_high = before
            alerts.extend(_asks(row, row.approvals - approvals, row.questions - questions))
            if row.repeats > repeats:
                alerts.append(Alert(row.run_id, f"run {row.run_id}: the guard blocked a repeat"))
            if high and not was_high and row.live:
                alerts.append(Alert(row.run_id, f"run {row.run_id}: {row.closest} of its cap"))
            if live and not row.live:
                severity = "information" if row.stop_reason == "goal_met" else "error"
                alerts.append(
                    Alert(row.run_id, f"run {row.run_id} stopped: {row.stop_reason}", severity)
                )
            expiry = row.soonest_expiry
            if row.approvals and expiry is not None and 0 < (expiry - now).total_seconds() < 30:
                key = (row.run_id, f"expiry {expiry.isoformat()}")
                if key not in self.said:
                    self.said.add(key)
                    alerts.append(
                        Alert(row.run_id, f"run {row.run_id}: a receipt expires in under 30 s")
                    )
        return alerts


def _asks(row: FleetRow, more_approvals: int, more_questions: int) -> list[Alert]:
    """A run that started waiting for an approval, or for an answer."""
    alerts = []
    if more_approvals > 0:
        alerts.append(Alert(row.run_id, f"run {row.run_id} waits for your approval"))
    if more_questions > 0:
        alerts.append(Alert(row.run_id, f"run {row.run_id} asks you a question"))
    return alerts
