"""What a command does to a run no worker holds (parked, queued, or its worker's lease lapsed):
it waits in the store, and the next worker with a free slot takes the run up and takes it (a
resume: it goes on; a cancel: it stops; a message: the model hears it). Said by `loopdeck
resume`, `cancel`, `pause` and `message` as what will happen, with, when no worker holds any
run of the store, that nothing will until one runs for it (an idle worker leaves no trace in
the store: the words stay conditional)."""

from __future__ import annotations

import shlex

from loopdeck.store import leases
from loopdeck.store.base import Store

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
    found = await leases.unheld(store, run_id)
    if found is None:
        return None
    state, workers = found
    where = WHERE.get(state, "its worker's lease lapsed")
    said = (
        f"{run_id}: {sent}; {where} (no worker holds it): the next worker with a free"
        f" slot takes it up, and {THEN[verb]}"
    )
    if not workers:
        # A PostgreSQL store is named without its password: no command to copy from it.
        command = f" (loopdeck worker --db {shlex.quote(str(store.path))})"
        said += (
            f"; no worker holds a run in {store.path} now: if none runs for it, nothing"
            f" happens until one starts{command if store.backend == 'sqlite' else ''}"
        )
    return said
