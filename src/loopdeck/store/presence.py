"""Which workers run for a store (schema v10, `workers`): a worker's row is written when it
starts (`arrive`), and by the same heartbeat that renews its leases, in that transaction
(`BEAT_WORKER`: its expiry pushed forward, the row made again if it was lost), a worker
holding no run too; it is marked `stopped_at` once it stops claiming (`leave`). A worker
killed, stopped (SIGSTOP) or cut off from the store beats no more: past its `expires_at` it
is `silent`, as its leases lapse. A worker of an older loopdeck, running since before its
store was brought to v10, keeps no row: each holder of a live lease without one is read as
running, its slots unknown.

Read by `loopdeck workers`, the fleet, a parked run's header, and the commands sent to a run
no worker holds (`operator/waking.py`): whether one runs that will take it up, all its slots
taken, or none runs and nothing happens until one starts. Rows of workers stopped or silent
for longer than `KEPT_S` are not read, and deleted when a worker arrives.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from loopdeck.store.base import Store
from loopdeck.store.leases import HELD

KEPT_S = 24 * 3600.0  # a worker stopped or silent this long is forgotten
# How often a reader that shows the workers (the fleet, a parked run's header) reads them
# at least: a worker killed goes silent with nothing committed.
READ_EVERY_S = 2.0
RUNNING, SILENT, STOPPED = "running", "silent", "stopped"

# One text both engines take (SQLite reads DOUBLE PRECISION as REAL, BIGINT as INTEGER).
WORKERS_TABLE = """
CREATE TABLE IF NOT EXISTS workers (
    holder TEXT PRIMARY KEY, host TEXT NOT NULL, pid BIGINT NOT NULL, slots BIGINT NOT NULL,
    started_at DOUBLE PRECISION NOT NULL, seen_at DOUBLE PRECISION NOT NULL,
    expires_at DOUBLE PRECISION NOT NULL, stopped_at DOUBLE PRECISION
);
"""
# The heartbeat's word for the worker itself (`beat_params`): its row made again if it was
# lost (deleted while it was frozen, or never made: its arrival failed), else pushed forward.
# A worker that left says nothing more: a beat under way as it stopped does not revive it.
BEAT_WORKER = (
    "INSERT INTO workers (holder, host, pid, slots, started_at, seen_at, expires_at)"
    " VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (holder) DO UPDATE SET"
    " seen_at = excluded.seen_at, expires_at = excluded.expires_at"
    " WHERE workers.stopped_at IS NULL"
)
# Every worker heard of in the last `KEPT_S`, and (its slots unknown) each holder of a live
# lease that has no row: (live leases' now, oldest kept, live leases' now).
SEEN = (
    "SELECT w.holder, w.host, w.pid, w.slots, w.started_at, w.seen_at, w.expires_at,"
    " w.stopped_at, (SELECT COUNT(*) FROM leases l WHERE l.holder = w.holder"
    f" AND l.state = '{HELD}' AND l.expires_at >= ?) AS holds"
    " FROM workers w WHERE w.expires_at >= ?"
    " UNION ALL SELECT l.holder, MAX(l.host), NULL, NULL, MIN(l.moved_at), NULL,"
    " MAX(l.expires_at), NULL, COUNT(*) FROM leases l"
    f" WHERE l.state = '{HELD}' AND l.expires_at >= ?"
    " AND NOT EXISTS (SELECT 1 FROM workers w WHERE w.holder = l.holder)"
    " GROUP BY l.holder ORDER BY 5, 1"
)


def beat_params(
    holder: str, host: str, pid: int, slots: int, started_at: float, at: float, until: float
) -> tuple[Any, ...]:
    """`BEAT_WORKER`'s parameters: the worker's row as of a beat at `at`, running `until`."""
    return (holder, host, pid, slots, started_at, at, until)


@dataclass(frozen=True)
class SeenWorker:
    """A worker as the store last heard of it, with the runs it holds under live leases.
    `slots` None: a holder of live leases that keeps no row (an older loopdeck's worker),
    read as running now, its slots and process unknown."""

    holder: str
    host: str
    pid: int | None
    slots: int | None
    started_at: float
    seen_at: float
    expires_at: float
    stopped_at: float | None
    holds: int

    def state(self, now: float) -> str:
        if self.stopped_at is not None:
            return STOPPED
        return RUNNING if self.expires_at >= now else SILENT

    @property
    def may_take(self) -> bool:
        """It has a free slot, or may have (its slots unknown)."""
        return self.slots is None or self.holds < self.slots

    @property
    def last_heard(self) -> float:
        return self.stopped_at if self.stopped_at is not None else self.seen_at

    def as_json(self, now: float) -> dict[str, Any]:
        return {
            "worker": self.holder, "host": self.host, "pid": self.pid,
            "state": self.state(now), "slots": self.slots, "holds": self.holds,
            "started_at": self.started_at, "seen_at": self.seen_at,
            "stopped_at": self.stopped_at,
        }  # fmt: skip


async def arrive(store: Store, holder: str, host: str, pid: int, slots: int, hold_s: float) -> None:
    """The worker's row, running for `hold_s` until its heartbeat's first beat; the rows of
    workers gone for longer than `KEPT_S` are deleted in the same transaction."""
    now = time.time()
    async with store.transaction() as tx:
        await tx.execute("DELETE FROM workers WHERE expires_at < ?", (now - KEPT_S,))
        await tx.execute(BEAT_WORKER, beat_params(holder, host, pid, slots, now, now, now + hold_s))


async def leave(store: Store, holder: str) -> None:
    """The worker stopped claiming (it hands its runs back next): no longer running."""
    now = time.time()
    await store.execute(
        "UPDATE workers SET stopped_at = ?, expires_at = ? WHERE holder = ?", (now, now, holder)
    )


async def seen(store: Store, now: float | None = None) -> list[SeenWorker]:
    """Every worker heard of in the last `KEPT_S`, oldest first, with the runs each holds
    now; a holder of live leases without a row among them, its slots unknown."""
    now = time.time() if now is None else now
    rows = await store.fetchall(SEEN, (now, now - KEPT_S, now))
    return [_seen(row, now) for row in rows]


def _seen(row: Any, now: float) -> SeenWorker:
    def number(name: str) -> float | None:
        return None if row[name] is None else float(row[name])

    listed = row["slots"] is not None
    return SeenWorker(
        str(row["holder"]),
        str(row["host"] or "-"),
        int(row["pid"]) if listed else None,
        int(row["slots"]) if listed else None,
        number("started_at") or now,
        number("seen_at") or now,  # unlisted: it holds a live lease, so it ran just now
        float(row["expires_at"]),
        number("stopped_at"),
        int(row["holds"]),
    )


def running(workers: list[SeenWorker], now: float) -> list[SeenWorker]:
    return [worker for worker in workers if worker.state(now) == RUNNING]


def last_gone(workers: list[SeenWorker]) -> SeenWorker | None:
    """Of workers none of which runs, the one heard of last."""
    return max(workers, key=lambda worker: worker.last_heard, default=None)
