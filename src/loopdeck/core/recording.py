"""Holding a run while its journal cannot record (the store is unreachable, locked, or its
disk is full): before a model call and before a write's dispatch the run waits for the
journal, on the operator's clock, instead of acting unrecorded; past `store_hold_s` it stops.

The core knows the store only as a `Journal`: `flush()`, and while it cannot take writes an
`outage` and `recovered()` to wait on."""

from __future__ import annotations

import time
from collections.abc import Awaitable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol, TypeVar

from loopdeck.core.config import RunConfig
from loopdeck.core.control import StopRun
from loopdeck.core.events import Emit, RecordingHeld, RecordingResumed
from loopdeck.core.states import StopReason
from loopdeck.core.timeouts import bounded

T = TypeVar("T")

# How each cause is said to an operator.
CAUSE_WORDS = {
    "unreachable": "store unreachable",
    "locked": "store locked by another process",
    "disk full": "disk full",
}


def outage_words(cause: str) -> str:
    return CAUSE_WORDS.get(cause, f"store unavailable ({cause})")


def outage_text(cause: str, since: datetime, spill: str | None) -> str:
    """A hold in a line: "disk full since 21:04:10, spilling to PATH"."""
    where = f", spilling to {spill}" if spill else ", retrying (nowhere could take a spill)"
    if spill and cause != "disk full":
        where = f", retrying (spilling to {spill})"
    return f"{outage_words(cause)} since {since.astimezone():%H:%M:%S}{where}"


@dataclass(frozen=True, slots=True)
class JournalOutage:
    """Why the journal cannot take writes, since when (UTC), the last error, and where the
    events it could not write are spilled meanwhile (None: nowhere could take them)."""

    cause: str
    since: datetime
    detail: str
    spill: str | None = None


class Journal(Protocol):
    """Where events become durable; `flush()` returns once everything emitted so far is."""

    async def flush(self) -> None: ...

    @property
    def outage(self) -> JournalOutage | None: ...

    async def recovered(self) -> None:
        """Returns once the journal takes writes again."""
        ...


class HoldHost(Protocol):
    config: RunConfig
    journal: Journal | None

    @property
    def emit(self) -> Emit: ...
    def operator_time(self, why: str) -> AbstractContextManager[None]: ...
    async def interruptible(self, awaitable: Awaitable[T], *, by_cancel: bool = False) -> T: ...


class RecordingHold:
    """The run's holds for its journal, and what it says of them (`held`, for the summary)."""

    def __init__(self, host: HoldHost) -> None:
        self.rt = host
        self.held: list[str] = []

    async def wait(self) -> None:
        """Return at once while the journal takes writes; else hold until it does again.
        A kill or a stop ends the hold; `store_hold_s` of it stops the run."""
        journal = self.rt.journal
        if journal is None:
            return
        outage = journal.outage
        if outage is not None:
            await self._hold(journal, outage)

    async def flush(self) -> None:
        """Before a write: everything so far is durable, or the write does not run."""
        journal = self.rt.journal
        if journal is None:
            return
        while True:
            await self.wait()
            try:
                await journal.flush()
                return
            except Exception as exc:  # the store failed: refuse the write rather than run it blind
                if journal.outage is not None:
                    continue  # it cannot take writes for now: hold, then flush again
                raise StopRun(
                    StopReason.POLICY_BLOCK,
                    f"the approval could not be recorded, so the write did not run: {exc}",
                ) from exc

    async def _hold(self, journal: Journal, outage: JournalOutage) -> None:
        rt = self.rt
        bound = rt.config.store_hold_s
        what = outage_words(outage.cause)
        rt.emit(
            RecordingHeld,
            run_id=rt.config.run_id,
            cause=outage.cause,
            since=outage.since,
            detail=outage.detail,
            spill=outage.spill,
            bound_s=bound,
        )
        started = time.monotonic()
        ended = "stopped"
        try:
            with rt.operator_time("store"):
                await rt.interruptible(bounded(journal.recovered(), bound), by_cancel=True)
            ended = "resumed"
        except TimeoutError:
            raise StopRun(
                StopReason.POLICY_BLOCK,
                f"{what} for {bound:g} s ({outage.detail}): stopped rather than act unrecorded",
            ) from None
        finally:
            held_s = time.monotonic() - started
            spilled = f", events spilled to {outage.spill}" if outage.spill else ""
            self.held.append(
                f"{what} since {outage.since.astimezone():%H:%M:%S}: held {held_s:.1f} s,"
                f" {ended}{spilled}"
            )
        rt.emit(RecordingResumed, run_id=rt.config.run_id, cause=outage.cause, held_s=held_s)
