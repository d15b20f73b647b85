"""A run's events as rows: each event's row of the `events` table (`event_row`: its body the
JSON made where the event was made, `EventBase.as_json`), and the `runs` and `approvals`
rows its events keep up to date (`RunRows`), applied in the transaction that appends them:
the run's row once per batch, with the summary the fleet reads (`store/feed.py`). A reader's
false crash mark is undone here too: the runner's record wins."""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Protocol, TypeVar, cast

from loopdeck.caps import Cap
from loopdeck.core.events import (
    ApprovalDecided,
    ApprovalInvalidated,
    ApprovalRequested,
    ApprovalWithdrawn,
    BudgetUpdated,
    Event,
    EventBase,
    Finding,
    GuardTripped,
    OperatorCommand,
    OutcomeResolved,
    PolicyDecided,
    QuestionAnswered,
    QuestionAsked,
    ReviewVerdict,
    RunStarted,
    RunStopped,
    StateChanged,
    ToolFinished,
    kind_of,
)
from loopdeck.core.replay_events import RunForked
from loopdeck.store.asking_clock import asked_expiry
from loopdeck.store.base import INVALIDATED, RESTORED, UNTAKEN, Tx
from loopdeck.store.chain import EventRow, body_at
from loopdeck.store.feed import finding, pause_word
from loopdeck.store.leases import RunEnd
from loopdeck.store.queries import CRASH_DETECTOR, QUESTION_NEVER_EXPIRES

# A question asked again replaces its row: pending again, unanswered.
ASKED_AGAIN = (
    "ON CONFLICT (run_id, call_id) DO UPDATE SET tool = excluded.tool, args = excluded.args,"
    " requested_at = excluded.requested_at, expires_at = excluded.expires_at,"
    " state = excluded.state, decided_by = excluded.decided_by, reason = NULL,"
    " decided_at = NULL, outcome = NULL, edited_args = NULL, grant_rule = NULL,"
    f" {UNTAKEN} = NULL"
)
# A write asked again replaces its row unless the store took a decision on it that the run has
# not taken (the store out of its reach for its whole last look): that one stays, and the run's
# next ask reads it (`store/approver.py`). A row nobody decided, or whose decision the run took
# (carried out, rejected, found no longer holding), is replaced: pending, nobody's old answer;
# so is a pending row an older (v7) runner asked again with its decider's mark still on it.
WRITE_ASKED_AGAIN = (
    f"{ASKED_AGAIN} WHERE NOT (COALESCE(approvals.{UNTAKEN}, 0) = 1"
    " AND approvals.state IN ('approved', 'rejected'))"
)


async def mark_untaken(tx: Tx) -> None:
    """A store from before v8 (the migration's transaction): a decision the store took that
    its run has not taken (the run's log has no `approval_decided` since the call's last
    asking) is marked untaken, as a v8 decider marks it, so the run's next asking keeps it
    instead of replacing it unread. A grant's approval is the run's own, never marked."""
    asked, decided = kind_of(ApprovalRequested), kind_of(ApprovalDecided)
    rows = await tx.fetchall(
        f"SELECT run_id, call_id FROM approvals WHERE {UNTAKEN} IS NULL"
        " AND state IN ('approved', 'rejected') AND COALESCE(decided_by, '') NOT LIKE 'grant %'"
    )
    last_said: dict[str, dict[str, str]] = {}  # per run: each call's last asking event
    for run_id, call_id in [(str(row[0]), str(row[1])) for row in rows]:
        if run_id not in last_said:
            said = await tx.fetchall(
                "SELECT kind, body FROM events WHERE run_id = ? AND kind IN (?, ?) ORDER BY seq",
                (run_id, asked, decided),
            )
            last_said[run_id] = {json.loads(body)["call_id"]: str(kind) for kind, body in said}
        if last_said[run_id].get(call_id) == asked:
            await tx.execute(
                f"UPDATE approvals SET {UNTAKEN} = 1 WHERE run_id = ? AND call_id = ?",
                (run_id, call_id),
            )


class Runner(Protocol):
    """The process whose events these are, as the run's row names it."""

    pid: int
    pid_started: str | None
    host: str
    approve_mode: str


class RunRows:
    """The rows of one run's events, and what they need to remember between batches: the
    run's last state, whether it stopped, and the calls that asked for approval (only their
    results touch the approvals table, so a read-only runaway's batch is one INSERT and one
    UPDATE of its run, not one statement per event)."""

    def __init__(self, runner: Runner, backend: str = "") -> None:
        self.runner = runner
        self.backend = backend  # the store's engine: an asking's expiry on its clock
        self.state = "ready"
        self.stopped = False
        self.asked: set[str] = set()
        # A call whose next asking a policy's rule decided (`PolicyDecided`): its state, by whom.
        self.ruled: dict[str, tuple[str, str]] = {}
        # The run row's columns this batch sets (the last value of each), and guard repeats.
        self.fields: dict[str, Any] = {}
        self.repeats = 0
        # The batch's last budget update: only its figures reach the run's row, read once.
        self.budget: BudgetUpdated | None = None

    async def apply_batch(self, tx: Tx, events: Iterable[Event]) -> None:
        """The runs and approvals rows a batch of appended events changes: approvals as
        their events come, the run's row once at the end."""
        self.fields, self.repeats, self.budget = {}, 0, None
        last: Event | None = None
        for event in events:
            last = event
            if (write := ROW_WRITERS.get(type(event))) is not None:
                if (statement := write(self, tx, event)) is not None:
                    await statement
            elif type(event) is ToolFinished and event.call_id in self.asked:
                await _tool_finished(self, tx, event)
        if last is None:
            return
        if self.budget is not None:
            _budget_fields(self, self.budget)
        fields = {"last_seq": last.seq, **self.fields}
        if "usage" in fields:
            fields["usage"] = json.dumps(fields["usage"])
        assigned = ", ".join(f"{column} = ?" for column in fields)
        if self.repeats:
            assigned += f", guard_repeats = guard_repeats + {self.repeats}"
        await tx.execute(
            f"UPDATE runs SET {assigned} WHERE run_id = ?", (*fields.values(), last.run_id)
        )

    async def undo_a_false_crash(
        self, tx: Tx, run_id: str, ended: RunEnd | None = None
    ) -> str | None:
        """A reader marked this run crashed while its runner (this process) is alive: the
        runner's record wins. The reader's stop event goes, the row and the approvals the
        reader withdrew come back; the correction's words, or None when there was none.
        `ended`: the run row's stop reason and detail if read already in this transaction
        (with a worker's lease)."""
        if self.stopped:
            return None
        if ended is None:
            rows = await tx.fetchall(
                "SELECT stop_reason, detail FROM runs WHERE run_id = ?", (run_id,)
            )
            ended = (rows[0][0], rows[0][1]) if rows else (None, None)
        if ended[0] != "crashed":
            return None
        await tx.execute("DELETE FROM events WHERE run_id = ? AND origin = 'reader'", (run_id,))
        await tx.execute(
            "UPDATE runs SET state = ?, stop_reason = NULL, detail = NULL, ended_at = NULL,"
            " heartbeat_at = ? WHERE run_id = ?",
            (self.state, time.time(), run_id),
        )
        await tx.execute(
            "UPDATE approvals SET state = 'pending', decided_by = NULL"
            " WHERE run_id = ? AND state = 'withdrawn' AND decided_by = ?",
            (run_id, CRASH_DETECTOR),
        )
        return f"a reader marked this run crashed ({ended[1]}); its runner is alive"


E = TypeVar("E", bound=EventBase)
# The rows of one class's events: a statement to await, or None (only run-row columns set).
Writer = Callable[[RunRows, Tx, E], Awaitable[None] | None]
RowWriter = Writer[Event]
# The events that change the runs or approvals tables (the rest are only appended), by class:
# run-row columns go in `RunRows.fields` (the batch's last value wins: a plain function, no
# statement, the most frequent events' case), approvals rows are written as they come (a
# coroutine); a ToolFinished only when its call asked for approval (its outcome goes on the
# approval's row).
ROW_WRITERS: dict[type[EventBase], RowWriter] = {}


def _writes(cls: type[E]) -> Callable[[Writer[E]], Writer[E]]:
    """Makes a function the row writer of `cls`'s events (typed for that class)."""

    def register(write: Writer[E]) -> Writer[E]:
        ROW_WRITERS[cls] = cast(RowWriter, write)  # called only with a `cls` event
        return write

    return register


@_writes(RunStarted)
async def _run_started(rows: RunRows, db: Tx, e: RunStarted) -> None:
    runner = rows.runner
    await db.execute(
        "INSERT INTO runs (run_id, env, script, model, mode, goal, state,"
        " started_at, pid, host, heartbeat_at, approve_mode, pid_started)"
        " VALUES (?, ?, ?, ?, ?, ?, 'ready', ?, ?, ?, ?, ?, ?)"
        " ON CONFLICT (run_id) DO UPDATE SET env = excluded.env,"
        " script = excluded.script, model = excluded.model, mode = excluded.mode,"
        " goal = excluded.goal, state = excluded.state, started_at = excluded.started_at,"
        " pid = excluded.pid, host = excluded.host, heartbeat_at = excluded.heartbeat_at,"
        " approve_mode = excluded.approve_mode, pid_started = excluded.pid_started",
        (e.run_id, e.env, e.script, e.model, e.mode, e.goal, e.at.isoformat(),
         runner.pid, runner.host, time.time(), runner.approve_mode, runner.pid_started),
    )  # fmt: skip


@_writes(StateChanged)
def _state_changed(rows: RunRows, db: Tx, e: StateChanged) -> None:
    rows.state = rows.fields["state"] = e.target._value_  # `.value`: a property, per event


@_writes(BudgetUpdated)
def _budget_updated(rows: RunRows, db: Tx, e: BudgetUpdated) -> None:
    rows.budget = e  # a runaway's every fifth event: its figures read at the batch's end


def _budget_fields(rows: RunRows, e: BudgetUpdated) -> None:
    caps = e.caps()
    spent = {cap: usage.used for cap, usage in caps.items()}  # None: unknown, never 0
    tokens, cost = spent.get(Cap.TOKENS), spent.get(Cap.COST)
    rows.fields.update(
        tokens=None if tokens is None else int(tokens),
        cost_usd=cost,
        cost_unknown_calls=e.cost_unknown_calls,
        usage=e.usage,  # as JSON once, at the batch's end
    )


@_writes(ReviewVerdict)
def _review_verdict(rows: RunRows, db: Tx, e: ReviewVerdict) -> None:
    rows.fields["last_finding"] = finding(e)


@_writes(Finding)
def _finding(rows: RunRows, db: Tx, e: Finding) -> None:
    rows.fields["last_finding"] = e.text


@_writes(OperatorCommand)
def _operator_command(rows: RunRows, db: Tx, e: OperatorCommand) -> None:
    paused = pause_word(e)
    if paused is not None:
        rows.fields["paused"] = paused


@_writes(GuardTripped)
def _guard_tripped(rows: RunRows, db: Tx, e: GuardTripped) -> None:
    rows.repeats += 1


@_writes(RunStopped)
async def _run_stopped(rows: RunRows, db: Tx, e: RunStopped) -> None:
    rows.stopped = True
    await db.execute(
        "UPDATE approvals SET state = 'withdrawn' WHERE run_id = ? AND state = 'pending'",
        (e.run_id,),
    )
    rows.fields.update(
        state=e.state.value, stop_reason=e.stop_reason.value, detail=e.detail,
        ended_at=e.at.isoformat(),
    )  # fmt: skip


@_writes(PolicyDecided)
async def _policy_decided(rows: RunRows, db: Tx, e: PolicyDecided) -> None:
    if e.effect in ("allow", "deny") and e.decided_by is not None:
        state = "approved" if e.effect == "allow" else "rejected"
        rows.ruled[e.call_id] = (state, e.decided_by.words())
    else:
        rows.ruled.pop(e.call_id, None)


@_writes(ApprovalRequested)
async def _approval_requested(rows: RunRows, db: Tx, e: ApprovalRequested) -> None:
    rows.asked.add(e.call_id)  # its outcome goes on the approval's row
    # A call a grant or a policy's rule decides is never pending: no other decider may take it.
    ruled: tuple[str, str | None] = rows.ruled.pop(e.call_id, ("pending", None))
    state, by = ("approved", f"grant {e.grant_id}") if e.grant_id else ruled
    asked = e.requested_at.isoformat()
    expiry, expires = asked_expiry(rows.backend, asked, e.expires_at.isoformat())
    await db.execute(
        "INSERT INTO approvals (run_id, call_id, tool, args, requested_at, expires_at, state,"
        f" decided_by) VALUES (?, ?, ?, ?, ?, {expiry}, ?, ?) {WRITE_ASKED_AGAIN}",
        (e.run_id, e.call_id, e.tool, json.dumps(e.args), asked, *expires, state, by),
    )  # fmt: skip


@_writes(ApprovalInvalidated)
async def _approval_invalidated(rows: RunRows, db: Tx, e: ApprovalInvalidated) -> None:
    """The approval the run took no longer holds: its row is the next ask's to replace. An
    asking that expired unanswered leaves its row as the store has it."""
    if not e.unanswered:
        await db.execute(
            f"UPDATE approvals SET state = '{INVALIDATED}' WHERE run_id = ? AND call_id = ?"
            " AND state = 'approved'",
            (e.run_id, e.call_id),
        )


@_writes(ApprovalDecided)
async def _approval_decided(rows: RunRows, db: Tx, e: ApprovalDecided) -> None:
    """The run took a decision: its row says it (a pending row; one whose decision from the
    store the run did not carry out as it was, an edit it cannot run made a rejection; a rule's
    asking, written decided, gains its reason), and is the next asking's to replace
    (`WRITE_ASKED_AGAIN`)."""
    state = "approved" if e.approved else "rejected"
    await db.execute(
        f"UPDATE approvals SET state = ?, decided_by = ?, reason = ?, decided_at = ?,"
        f" {UNTAKEN} = NULL WHERE run_id = ? AND call_id = ? AND (state = 'pending'"
        f" OR ({UNTAKEN} = 1 AND state <> ?) OR (state = ? AND decided_by = ?"
        " AND decided_at IS NULL))",
        (state, e.by, e.reason, e.at.isoformat(), e.run_id, e.call_id, state, state, e.by),
    )
    await db.execute(
        f"UPDATE approvals SET {UNTAKEN} = NULL WHERE run_id = ? AND call_id = ? AND {UNTAKEN} = 1",
        (e.run_id, e.call_id),
    )


@_writes(QuestionAsked)
async def _question_asked(rows: RunRows, db: Tx, e: QuestionAsked) -> None:
    await db.execute(
        "INSERT INTO approvals (run_id, call_id, tool, args, requested_at,"
        f" expires_at, state) VALUES (?, ?, 'ask_user', ?, ?, ?, 'pending') {ASKED_AGAIN}",
        (e.run_id, e.question_id, json.dumps({"question": e.question}),
         e.at.isoformat(), QUESTION_NEVER_EXPIRES),
    )  # fmt: skip


@_writes(QuestionAnswered)
async def _question_answered(rows: RunRows, db: Tx, e: QuestionAnswered) -> None:
    await db.execute(
        "UPDATE approvals SET state = 'answered', decided_by = ?, reason = ?,"
        " decided_at = ? WHERE run_id = ? AND call_id = ? AND state = 'pending'",
        (e.by, e.answer, e.at.isoformat(), e.run_id, e.question_id),
    )


@_writes(OutcomeResolved)
async def _outcome_resolved(rows: RunRows, db: Tx, e: OutcomeResolved) -> None:
    """The operator's word on an unknown outcome (the store may have it already: the
    resolution that won is written there first)."""
    await db.execute(
        "UPDATE approvals SET outcome = ? WHERE run_id = ? AND call_id = ?",
        ("executed" if e.applied else "failed", e.run_id, e.call_id),
    )


@_writes(RunForked)
async def _run_forked(rows: RunRows, db: Tx, e: RunForked) -> None:
    """A fork's writes its restored state settles are no longer unknown (`RESTORED`)."""
    for call_id in e.settled:
        await db.execute(
            "UPDATE approvals SET outcome = ? WHERE run_id = ? AND call_id = ?",
            (RESTORED, e.run_id, call_id),
        )


@_writes(ApprovalWithdrawn)
async def _approval_withdrawn(rows: RunRows, db: Tx, e: ApprovalWithdrawn) -> None:
    await db.execute(
        "UPDATE approvals SET state = 'withdrawn' WHERE run_id = ? AND call_id = ?"
        " AND state = 'pending'",
        (e.run_id, e.call_id),
    )


async def _tool_finished(rows: RunRows, db: Tx, e: ToolFinished) -> None:
    """Only for a call that asked for approval (`RunRows.asked`)."""
    await db.execute(
        "UPDATE approvals SET outcome = ? WHERE run_id = ? AND call_id = ?",
        (e.status.value, e.run_id, e.call_id),
    )


def event_row(event: Event) -> EventRow:
    """An event's row: (run_id, seq, kind, at, body). The body is the event's own JSON, made
    once (`EventBase.as_json`); `at` is read off it (`chain.body_at`): formatting the time
    again was a sixth of the cost of an append."""
    body = event.as_json()
    fields = event.__dict__  # read once: each attribute of a model goes through its hook
    at = body_at(body) or fields["at"].isoformat()
    return fields["run_id"], fields["seq"], fields["kind"], at, body


def event_json(event: EventBase) -> str:
    """An event as stored: its JSON (`EventBase.as_json`)."""
    return event.as_json()
