"""Which workers run for a store (schema v10, `workers`): a worker's row is written when it
starts (`arrive`), its `expires_at` pushed forward by the same heartbeat that renews its
leases (`BEAT_WORKER`, in that transaction: a worker holding no run beats too), and marked
`stopped_at` when it stops in order (`leave`). A worker killed, stopped (SIGSTOP) or cut off
from the store beats no more: past its `expires_at` it is `silent`, as its leases lapse.

Read by `loopdeck workers`, and by the commands sent to a run no worker holds
(`operator/waking.py`): whether one runs that will take it up, all its slots taken, or none
runs and nothing happens until one starts. Rows of workers stopped or silent for longer
than `KEPT_S` are deleted when a worker arrives.
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
# The heartbeat's word for the worker itself: (seen_at, expires_at, holder). A worker that
# left says nothing more: a beat already under way as it stopped does not revive it.
BEAT_WORKER = (
    "UPDATE workers SET seen_at = ?, expires_at = ? WHERE holder = ? AND stopped_at IS NULL"
)


@dataclass(frozen=True)
class SeenWorker:
    """A worker as the store last heard of it, with the runs it holds under live leases."""

    holder: str
    host: str
    pid: int
    slots: int
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
    def free(self) -> int:
        return max(self.slots - self.holds, 0)

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
        await tx.execute(
            "INSERT INTO workers (holder, host, pid, slots, started_at, seen_at, expires_at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?)",
            (holder, host, pid, slots, now, now, now + hold_s),
        )


async def leave(store: Store, holder: str) -> None:
    """The worker stopped in order: no longer counted as running."""
    now = time.time()
    await store.execute(
        "UPDATE workers SET stopped_at = ?, expires_at = ? WHERE holder = ?", (now, now, holder)
    )


async def seen(store: Store, now: float | None = None) -> list[SeenWorker]:
    """Every worker the store holds a row of, oldest first, with the runs each holds now."""
    now = time.time() if now is None else now
    rows = await store.fetchall(
        "SELECT w.holder, w.host, w.pid, w.slots, w.started_at, w.seen_at, w.expires_at,"
        " w.stopped_at, (SELECT COUNT(*) FROM leases l WHERE l.holder = w.holder"
        f" AND l.state = '{HELD}' AND l.expires_at >= ?) AS holds"
        " FROM workers w ORDER BY w.started_at, w.holder",
        (now,),
    )
    return [
        SeenWorker(
            str(row["holder"]),
            str(row["host"]),
            int(row["pid"]),
            int(row["slots"]),
            float(row["started_at"]),
            float(row["seen_at"]),
            float(row["expires_at"]),
            None if row["stopped_at"] is None else float(row["stopped_at"]),
            int(row["holds"]),
        )
        for row in rows
    ]


def running(workers: list[SeenWorker], now: float) -> list[SeenWorker]:
    return [worker for worker in workers if worker.state(now) == RUNNING]


def last_gone(workers: list[SeenWorker]) -> SeenWorker | None:
    """Of workers none of which runs, the one heard of last."""
    return max(workers, key=lambda worker: worker.expires_at, default=None)
