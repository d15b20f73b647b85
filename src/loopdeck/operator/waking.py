"""What a resume does to a run no worker holds (parked while paused, or its worker's lease
lapsed): the command waits in the store, and the next worker with a free slot takes the run
up, takes the resume and goes on. Said by `loopdeck resume` as what will happen, with, when
no worker holds any run of the store, that nothing will until one runs for it (an idle worker
leaves no trace in the store: the words stay conditional)."""

from __future__ import annotations

import shlex

from loopdeck.store import leases
from loopdeck.store.base import Store

WHERE = {leases.PARKED: "it is parked", leases.QUEUED: "it is queued"}


async def resume_words(store: Store, run_id: str) -> str | None:
    """`RUN: resume sent; …` for a run no worker holds; None when one holds it (or its
    runner is a process of its own): it takes the resume itself."""
    found = await leases.unheld(store, run_id)
    if found is None:
        return None
    state, workers = found
    where = WHERE.get(state, "its worker's lease lapsed")
    said = (
        f"{run_id}: resume sent; {where} (no worker holds it): the next worker with a free"
        " slot takes it up, and it goes on"
    )
    if not workers:
        # A PostgreSQL store is named without its password: no command to copy from it.
        command = f" (loopdeck worker --db {shlex.quote(str(store.path))})"
        said += (
            f"; no worker holds a run in {store.path} now: if none runs for it, nothing"
            f" happens until one starts{command if store.backend == 'sqlite' else ''}"
        )
    return said
