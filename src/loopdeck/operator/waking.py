"""What a command does to a run no worker holds (parked, queued, or its worker's lease lapsed):
it waits in the store, and the next worker with a free slot takes the run up and takes it (a
resume: it goes on; a cancel: it stops; a message: the model hears it). Said by `loopdeck
resume`, `cancel`, `pause` and `message` as what will happen, by what the store knows of its
workers (`store/presence.py`): when none runs for it, that nothing happens until one starts
(naming the last one heard of); when every running worker's slots are taken, that it waits for
one to free."""

from __future__ import annotations

import shlex
import time
from datetime import datetime

from loopdeck.core.text import plural
from loopdeck.store import leases, presence
from loopdeck.store.base import Store

SeenWorker = presence.SeenWorker  # what `loopdeck workers` lists, each worker as last heard of
SILENT = presence.SILENT
WHERE = {leases.PARKED: "it is parked", leases.QUEUED: "it is queued"}
# What the run does with each command once a worker takes it up.
THEN = {
    "resume": "it goes on",
    "cancel": "it stops after its current tools",
    "kill": "it stops",
    "pause": "it pauses before its next model call",
    "message": "the model hears it next turn",
}


async def waking_words(store: Store, run_id: str, verb: str, sent: str) -> str | None:
    """`RUN: SENT; …` for a run no worker holds, what it does once one takes it up; None when
    one holds it (or its runner is a process of its own): it takes the command itself."""
    if (state := await leases.unheld(store, run_id)) is None:
        return None
    where = WHERE.get(state, "its worker's lease lapsed")
    said = (
        f"{run_id}: {sent}; {where} (no worker holds it): the next worker with a free"
        f" slot takes it up, and {THEN[verb]}"
    )
    return said + await workers_words(store)


async def workers_words(store: Store) -> str:
    """What the store's workers mean for a run waiting for one: "" when one running has a
    free slot (or may: an older loopdeck's, its slots unknown); else that it waits for a
    slot, or that none runs (and which was last heard of)."""
    now = time.time()
    workers = await presence.seen(store, now)
    running = presence.running(workers, now)
    if running and any(worker.may_take for worker in running):
        return ""
    if running:
        slots = sum(worker.slots or 0 for worker in running)
        who = f"the {len(running)} workers" if len(running) > 1 else "the one worker"
        have = "have" if len(running) > 1 else "has"
        return (
            f"; {who} running for {store.path} {have} every slot taken ({slots} in all):"
            " it waits for one to free"
        )
    last = presence.last_gone(workers)
    heard = ""
    if last is not None:
        gone = "stopped at" if last.stopped_at is not None else "silent since it was last heard at"
        at = datetime.fromtimestamp(last.last_heard)
        heard = f" (the last, {last.holder}, {gone} {at:%Y-%m-%d %H:%M:%S})"
    # A PostgreSQL store is named without its password: no command to copy from it.
    command = f" (loopdeck worker --db {shlex.quote(str(store.path))})"
    return (
        f"; no worker runs for {store.path}{heard}: nothing happens until one starts"
        f"{command if store.backend == 'sqlite' else ''}"
    )


def fleet_words(workers: list[presence.SeenWorker], now: float, waiting: bool) -> str:
    """The fleet's word on its store's workers: "2 workers · 3 of 8 slots" while some run
    ("2 workers · 3 runs" when one's slots are unknown: an older loopdeck's); "no worker
    runs" once none does, if one ran in the last day or a run waits for one (`waiting`:
    queued or parked); "" for a store no worker ran for and no run waits in."""
    running = presence.running(workers, now)
    if not running:
        return "no worker runs" if workers or waiting else ""
    held = sum(worker.holds for worker in running)
    slots = [worker.slots for worker in running]
    if None in slots:
        return f"{plural(len(running), 'worker')} · {plural(held, 'run')}"
    return f"{plural(len(running), 'worker')} · {held} of {sum(s or 0 for s in slots)} slots"


async def seen_workers(store: Store) -> tuple[list[SeenWorker], float]:
    """Every worker the store heard of in the last day, and the time they were read at."""
    now = time.time()
    return await presence.seen(store, now), now
