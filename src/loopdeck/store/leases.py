"""Runs placed on workers (`loopdeck submit`, `loopdeck worker`): the queue, the claims, the
leases and the fence, in one table of the store (`leases`, schema v6) beside the event log.
The fleet follows it by its change number (`changed`, v7: `store/feed.py`).

A submitted run is a row `queued` with the options it was submitted with. A worker claims one
(`claim`): the row becomes `held` by that worker, its `epoch` one higher, its lease running
until `expires_at`, which the worker's heartbeat pushes forward (`Beats.renew`, every holder's
runs in one statement). A lease that ran out is claimable again: its worker died, hangs, or
lost the store; the next claim moves the run to another worker with the next epoch.

The fence: every commit of a run's events checks, inside its own transaction, that the run is
still held under the committing worker's epoch (`check`), with the lease's row locked on
PostgreSQL (a claim skips a row locked by a commit in flight, and a commit waits for a claim
that came first), so a worker whose lease moved appends nothing: `LeaseLost`, which its writer
never retries or spills. The claim reads no events: whoever claims reads the log afterwards,
and sees every commit made under the epoch before its own; a run's first claim (`Claim.first`)
has no log to read.

A run waiting on the operator past a short bound is `parked` by its worker (no worker holds
it) and becomes claimable once nothing of it is pending any more, its request expired, or a
command was sent to it (`CLAIMABLE`); a paused one, not by a decision: by a command (its
resume, a cancel) or its request's expiry. A run that
stopped is `ended`. Claims take the oldest claimable run first; PostgreSQL's `FOR UPDATE SKIP
LOCKED` lets many workers claim at once without waiting on each other, SQLite's one writer
makes the same statement safe.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from dataclasses import dataclass
from typing import Any

from loopdeck import settings
from loopdeck.store.asking_clock import asked_expiry
from loopdeck.store.base import Store, StoreError, Tx
from loopdeck.store.liveness import process_started, this_host

QUEUED, HELD, PARKED, ENDED = "queued", "held", "parked", "ended"
LIVE = (QUEUED, HELD, PARKED)  # a run a worker holds or will: no reader marks it crashed

# One text both engines take (SQLite reads DOUBLE PRECISION as REAL, BIGINT as INTEGER).
LEASES_TABLE = """
CREATE TABLE IF NOT EXISTS leases (
    run_id TEXT PRIMARY KEY, options TEXT NOT NULL, state TEXT NOT NULL,
    epoch BIGINT NOT NULL DEFAULT 0, holder TEXT, host TEXT, expires_at DOUBLE PRECISION,
    submitted_at DOUBLE PRECISION NOT NULL, moved_at DOUBLE PRECISION, note TEXT,
    changed BIGINT, unmovable TEXT
);
CREATE INDEX IF NOT EXISTS leases_claimable ON leases (state, expires_at);
"""

# What a worker may claim: a queued run, a run whose lease ran out, a parked run whose
# operator has decided (nothing of it pending) unless it is paused (a decision waits for its
# resume, as its next model call would), whose request expired, or which was sent a command
# (a resume, a cancel, a message: its runtime takes it).
PAUSED = "EXISTS (SELECT 1 FROM runs r WHERE r.run_id = leases.run_id AND r.paused = 1)"
SENT = "EXISTS (SELECT 1 FROM commands c WHERE c.run_id = leases.run_id AND c.consumed_at IS NULL)"
CLAIMABLE = (
    f"(state = '{QUEUED}' OR (state = '{HELD}' AND expires_at < ?)"
    f" OR (state = '{PARKED}' AND (expires_at < ? OR (NOT EXISTS (SELECT 1 FROM approvals a"
    f" WHERE a.run_id = leases.run_id AND a.state = 'pending') AND NOT {PAUSED})"
    f" OR {SENT})))"
)
RENEW = (
    f"UPDATE leases SET expires_at = ? WHERE holder = ? AND state = '{HELD}'"
    " RETURNING run_id, epoch"
)
BEAT_HELD = (
    "UPDATE runs SET heartbeat_at = ? WHERE run_id IN"
    f" (SELECT run_id FROM leases WHERE holder = ? AND state = '{HELD}')"
)


def park_after_s() -> float:
    """How long a run waits on its operator in a worker before it is parked, its slot freed
    (`Settings.park_after_s`: more than 0, else its default of 10 s)."""
    return settings.current().park_after_s


def lease_s() -> float:
    """How long a claim holds without a renewal (`Settings.lease_s`: more than 0, else its
    default of 10 s): a worker gone is replaced this long after its last renewal."""
    return settings.current().lease_s


class LeaseLost(StoreError):
    """The run is no longer this worker's (another worker claimed it under a higher epoch,
    or it was parked or ended): nothing more of this worker's is appended, nothing run."""


@dataclass(frozen=True)
class WorkerName:
    """Who holds a lease: the worker's host, its process and a token of its own (a pid is
    reused; the token is not)."""

    host: str
    pid: int
    token: str

    @classmethod
    def here(cls) -> WorkerName:
        return cls(this_host(), os.getpid(), uuid.uuid4().hex[:8])

    @property
    def holder(self) -> str:
        return f"{self.host}/{self.pid}/{self.token}"


@dataclass(frozen=True)
class Claim:
    """A run this worker now holds: its epoch (every commit carries it), the options it was
    submitted with, and where it was before (None: its first start)."""

    run_id: str
    epoch: int
    options: dict[str, Any]
    was: str | None  # the previous holder's host, or None
    was_state: str
    note: str
    sent: bool = True  # a command waited for it at its claim (False: none did)

    @property
    def first(self) -> bool:
        """Its first claim: a run no worker held before has no events of its own yet (a
        submit refuses an id the store holds), so nothing of its log is read."""
        return self.was is None and self.was_state == QUEUED


async def submit(store: Store, run_id: str, options: dict[str, Any]) -> None:
    """The run recorded as queued, for the next free worker; an id the store already holds
    (queued, or a run of its own) is refused."""
    async with store.transaction(run_id, pipelined=True) as tx:
        taken = await tx.fetchall(
            "SELECT 1 FROM leases WHERE run_id = ? UNION ALL SELECT 1 FROM runs WHERE run_id = ?",
            (run_id, run_id),
        )
        if taken:
            raise StoreError(f"{store.path}: already holds a run with id {run_id}; choose another")
        await tx.execute(
            "INSERT INTO leases (run_id, options, state, submitted_at, note)"
            " VALUES (?, ?, ?, ?, ?)",
            (run_id, json.dumps(options), QUEUED, time.time(), "queued"),
        )


def _locking(store: Store) -> str:
    return " FOR UPDATE SKIP LOCKED" if store.backend == "postgresql" else ""


async def claim(
    store: Store, worker: WorkerName, hold_s: float, *, now: float | None = None
) -> Claim | None:
    """The oldest claimable run, now this worker's under the next epoch; None when there is
    none. A run this worker holds is not claimed again when its lease ran out (the store
    was down): its next renewal confirms it, and its run goes on where it waited. The run's
    row names this worker as its runner (the fleet shows where it is).
    Pipelined: a look that finds none is one round trip and its COMMIT, a claim two. Its
    time is taken once the store's connection is in hand, as its statements go: a wait for
    the connection is no part of the lease, nor of when the run moved."""
    async with store.transaction(pipelined=True) as tx:
        now = time.time() if now is None else now
        rows = await tx.fetchall(
            "SELECT run_id, epoch, options, state, host, expires_at, (SELECT COUNT(*) FROM"
            " approvals a WHERE a.run_id = leases.run_id AND a.state = 'pending') AS waiting,"
            f" {PAUSED} AS paused, {SENT} AS sent FROM leases WHERE {CLAIMABLE}"
            f" AND NOT (state = '{HELD}' AND holder = ?) ORDER BY submitted_at LIMIT 1"
            f"{_locking(store)}",
            (now, now, worker.holder),
        )
        if not rows:
            return None
        row = rows[0]
        run_id, epoch = str(row["run_id"]), int(row["epoch"]) + 1
        was = None if row["host"] is None else str(row["host"])
        expired = float(row["expires_at"] or 0)
        # Still waiting on a decision, or paused: no decision woke it.
        undecided = int(row["waiting"]) or int(bool(row["paused"]))
        note = _move_note(str(row["state"]), was, worker.host, expired, now, undecided)
        await tx.execute(
            "UPDATE leases SET state = ?, epoch = ?, holder = ?, host = ?, expires_at = ?,"
            " moved_at = ?, note = ? WHERE run_id = ?",
            (HELD, epoch, worker.holder, worker.host, now + hold_s, now, note, run_id),
        )
        await tx.execute(
            "UPDATE runs SET pid = ?, host = ?, pid_started = ?, heartbeat_at = ? WHERE run_id = ?",
            (worker.pid, worker.host, process_started(worker.pid), now, run_id),
        )
    options = json.loads(row["options"])
    return Claim(run_id, epoch, options, was, str(row["state"]), note, bool(row["sent"]))


def _move_note(
    state: str, was: str | None, host: str, expired: float, now: float, waiting: int = 0
) -> str:
    """A claim in words: `started on host B`, `resumed on host B after host A's lease
    expired 3s ago`, a parked run's by what woke it: `resumed on host B once its operator
    decided`, `… once its request expired`, `… for its operator's command` (`waiting`: it
    still waits on a decision, or it is paused: no decision woke it)."""
    if state == QUEUED and was is None:
        return f"started on {host}"
    if state == QUEUED:
        return f"resumed on {host} after {was} handed it back"
    if state == PARKED:
        woken = (
            "once its request expired" if expired and expired < now
            else "once its operator decided" if not waiting
            else "for its operator's command"
        )  # fmt: skip
        return f"resumed on {host} {woken} (parked by {was})"
    return f"resumed on {host} after {was}'s lease expired {max(now - expired, 0):.0f}s ago"


# A run's row as a commit reads it with its lease: its stop reason and detail (None, None
# when the run has no row yet).
RunEnd = tuple[str | None, str | None]


async def check(tx: Tx, store: Store, run_id: str, epoch: int) -> RunEnd:
    """Inside a commit's transaction: the run is still held under `epoch`, else `LeaseLost`.
    On PostgreSQL the row stays locked until the commit ends, and a transaction left idle
    (its process stopped mid-commit) is ended by the server after a lease, so a stopped
    worker cannot keep a run from moving. Read in the same statement: the run's stop reason
    and detail, which the writer looks at for a reader's false crash mark."""
    if store.backend == "postgresql":
        idle_ms = int(lease_s() * 1000)
        rows = await tx.fetchall(
            "SELECT l.epoch, l.state, l.holder, r.stop_reason, r.detail,"
            " set_config('idle_in_transaction_session_timeout', ?, true)"
            " FROM leases l LEFT JOIN runs r ON r.run_id = l.run_id WHERE l.run_id = ?"
            " FOR UPDATE OF l",
            (str(idle_ms), run_id),
        )
    else:
        rows = await tx.fetchall(
            "SELECT l.epoch, l.state, l.holder, r.stop_reason, r.detail"
            " FROM leases l LEFT JOIN runs r ON r.run_id = l.run_id WHERE l.run_id = ?",
            (run_id,),
        )
    if not rows:
        raise LeaseLost(f"run {run_id} is not in the store's queue: epoch {epoch} may not write")
    held, state = int(rows[0]["epoch"]), str(rows[0]["state"])
    if held != epoch or state != HELD:
        where = rows[0]["holder"] or "nobody"
        raise LeaseLost(
            f"run {run_id} moved on (epoch {held}, {state}, held by {where}): this worker's"
            f" epoch {epoch} may append nothing more"
        )
    return rows[0]["stop_reason"], rows[0]["detail"]


async def let_go(
    store: Store, run_id: str, epoch: int, state: str, note: str, *, until: float | None = None
) -> bool:
    """The run leaves this worker's hands: `ended` (it stopped), `parked` (it waits on its
    operator; `until` its request's expiry) or `queued` (handed back). False when it was no
    longer this worker's."""
    changed = await store.execute(
        "UPDATE leases SET state = ?, holder = NULL, expires_at = ?, moved_at = ?, note = ?"
        f" WHERE run_id = ? AND epoch = ? AND state = '{HELD}'",
        (state, until, time.time(), note, run_id, epoch),
    )
    return changed == 1


async def pin(store: Store, run_id: str, epoch: int, why: str) -> None:
    """The run cannot go on in another worker (`why`: `operator/resume.unresumable`, said by
    the worker that prepared it): once its lease lapses it is `stranded`."""
    await store.execute(
        "UPDATE leases SET unmovable = ? WHERE run_id = ? AND epoch = ?", (why, run_id, epoch)
    )


def stranded(row: Any, now: float) -> str | None:
    """Why a placed run will never go on (its lease lapsed, and it cannot move: its worker
    said why, `pin`); None while it may. A row read without `unmovable` says nothing."""
    fields = dict(row)
    why, expires = fields.get("unmovable"), fields.get("expires_at")
    if not why or fields.get("state") != HELD or expires is None or float(expires) >= now:
        return None
    return str(why)


def after_lapse(row: Any, now: float) -> str:
    """What becomes of a run whose lease lapsed (`queries.lapsed`'s note), in words."""
    if (why := stranded(row, now)) is not None:
        return f"it cannot go on ({why}); the next worker to take it up ends it crashed"
    return "it waits for a worker to take it up, and goes on from its log then"


async def stranded_run(store: Store | Tx, run_id: str) -> str | None:
    """`stranded`, read from the run's lease now."""
    rows = await store.fetchall(
        "SELECT state, expires_at, unmovable FROM leases WHERE run_id = ?", (run_id,)
    )
    return stranded(rows[0], time.time()) if rows else None


async def placement(store: Store, run_id: str) -> dict[str, Any] | None:
    """A submitted run's row: its state, epoch, holder, lease and last move."""
    rows = await store.fetchall(
        "SELECT run_id, options, state, epoch, holder, host, expires_at, submitted_at,"
        " moved_at, note, unmovable FROM leases WHERE run_id = ?",
        (run_id,),
    )
    return dict(rows[0]) if rows else None


async def parking(store: Store, run_id: str) -> tuple[str, str | None] | None:
    """A submitted run's lease state and note (`parked by host-a: …`); None if never placed."""
    rows = await store.fetchall("SELECT state, note FROM leases WHERE run_id = ?", (run_id,))
    return (str(rows[0]["state"]), rows[0]["note"]) if rows else None


async def is_placed(store: Store | Tx, run_id: str) -> bool:
    """Whether a worker holds the run or will (queued, held, parked)."""
    rows = await store.fetchall(
        f"SELECT 1 FROM leases WHERE run_id = ? AND state IN {LIVE}", (run_id,)
    )
    return bool(rows)


async def refresh_request(
    store: Store, run_id: str, call_id: str, requested_at: str, expires_at: str
) -> None:
    """A write asked before its run moved, still pending: its expiry counted again from the
    ask of the worker that goes on with it, on the store's clock (`store/asking_clock.py`);
    a decision made meanwhile stays as it is."""
    expiry, expires = asked_expiry(store.backend, requested_at, expires_at)
    await store.execute(
        f"UPDATE approvals SET requested_at = ?, expires_at = {expiry}"
        " WHERE run_id = ? AND call_id = ? AND state = 'pending'",
        (requested_at, *expires, run_id, call_id),
    )


async def unheld(store: Store, run_id: str) -> str | None:
    """A placed run no worker holds now (parked, queued, or held under a lease that lapsed):
    its lease's state. None when a worker holds it, or it was never placed (its runner its
    own process). Which workers run for the store: `store/presence.py`."""
    rows = await store.fetchall("SELECT state, expires_at FROM leases WHERE run_id = ?", (run_id,))
    if not rows or rows[0]["state"] not in LIVE:
        return None
    if rows[0]["state"] == HELD and float(rows[0]["expires_at"] or 0) >= time.time():
        return None
    return str(rows[0]["state"])
