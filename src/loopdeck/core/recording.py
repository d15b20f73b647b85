"""Holding a run while its journal cannot record (the store is unreachable, locked, its disk
is full, or it refuses the run's login): before a model call and before a write's dispatch
the run waits for the journal, on the operator's clock, instead of acting unrecorded; past
`store_hold_s` it stops.

A refused login is told from outside as well (`RecordingHold.refused`, by whoever reads the
store for the run): the run hears no decision, answer or command meanwhile, so it holds
wherever it waits, and stops at the same bound unless the login works again (`accepted`).

The core knows the store only as a `Journal`: `flush()`, and while it cannot take writes an
`outage` and `recovered()` to wait on."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Protocol, TypeVar

from loopdeck.core.config import RunConfig
from loopdeck.core.control import RunControl, StopRun
from loopdeck.core.events import Emit, RecordingHeld, RecordingResumed
from loopdeck.core.states import StateMachine, StopReason
from loopdeck.core.timeouts import bounded

T = TypeVar("T")

# How each cause is said to an operator.
REFUSED = "login refused"
CAUSE_WORDS = {
    "unreachable": "store unreachable",
    "locked": "store locked by another process",
    "disk full": "disk full",
    REFUSED: "the store refuses loopdeck's login",
}


def outage_words(cause: str) -> str:
    return CAUSE_WORDS.get(cause, f"store unavailable ({cause})")


def outage_text(cause: str, since: datetime, spill: str | None) -> str:
    """A hold in a line: "disk full since 21:04:10, spilling to PATH"."""
    where = f", spilling to {spill}" if spill else ", retrying (nowhere could take a spill)"
    if spill and cause != "disk full":
        where = f", retrying (spilling to {spill})"
    elif not spill and cause == REFUSED:  # told before anything had to be spilled
        where = ", trying its login again"
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
    control: RunControl
    machine: StateMachine

    @property
    def emit(self) -> Emit: ...
    def operator_time(self, why: str) -> AbstractContextManager[None]: ...
    async def interruptible(self, awaitable: Awaitable[T], *, by_cancel: bool = False) -> T: ...


@dataclass(slots=True)
class _Refusal:
    """A refused login told from outside: when it began, whether it was said (not while a
    hold of the journal's own already said it), the stop armed for its bound."""

    outage: JournalOutage
    started: float
    said: bool
    stop: asyncio.TimerHandle


class RecordingHold:
    """The run's holds for its journal, and what it says of them (`held`, for the summary)."""

    def __init__(self, host: HoldHost) -> None:
        self.rt = host
        self.held: list[str] = []
        self._refusal: _Refusal | None = None
        self._holding = False  # a hold of `_hold` is under way, said

    def refused(self, cause: str, detail: str) -> None:
        """The store refuses the run's login: said once (`RecordingHeld`), and `store_hold_s`
        later the run stops `policy_block`, as a kill would (a wait for the operator ends at
        once), unless `accepted` came first."""
        if self._refusal is not None or self.rt.machine.is_terminal:  # said, or nothing to hold
            return
        outage = JournalOutage(cause=cause, since=datetime.now(UTC), detail=detail)
        bound = self.rt.config.store_hold_s
        said = not self._holding
        if said:
            self._said(outage, bound)
        stop = asyncio.get_running_loop().call_later(bound, self._refusal_lasted, bound)
        self._refusal = _Refusal(outage, time.monotonic(), said, stop)

    def accepted(self) -> None:
        """The store takes the run's login again: a refusal's hold ends."""
        refusal, self._refusal = self._refusal, None
        if refusal is None:
            return
        refusal.stop.cancel()
        if refusal.said:
            held_s = self._note(refusal.outage, refusal.started, "resumed")
            run_id, cause = self.rt.config.run_id, refusal.outage.cause
            self.rt.emit(RecordingResumed, run_id=run_id, cause=cause, held_s=held_s)

    def _refusal_lasted(self, bound: float) -> None:
        refusal = self._refusal
        if refusal is None:
            return
        if refusal.said:
            self._note(refusal.outage, refusal.started, "stopped")
        self.rt.control.fail(StopReason.POLICY_BLOCK, stop_words(refusal.outage, bound))

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
        # A refused login said already, its stop armed earlier: this hold is its, unsaid.
        told = self._refusal is None or not self._refusal.said
        if told:
            self._said(outage, bound)
        started = time.monotonic()
        ended = "stopped"
        self._holding = told
        try:
            with rt.operator_time("store"):
                await rt.interruptible(bounded(journal.recovered(), bound), by_cancel=True)
            ended = "resumed"
        except TimeoutError:
            raise StopRun(StopReason.POLICY_BLOCK, stop_words(outage, bound)) from None
        finally:
            self._holding = False
            held_s = self._note(outage, started, ended) if told else 0.0
        if told:
            rt.emit(RecordingResumed, run_id=rt.config.run_id, cause=outage.cause, held_s=held_s)

    def _said(self, outage: JournalOutage, bound: float) -> None:
        self.rt.emit(
            RecordingHeld,
            run_id=self.rt.config.run_id,
            cause=outage.cause,
            since=outage.since,
            detail=outage.detail,
            spill=outage.spill,
            bound_s=bound,
        )

    def _note(self, outage: JournalOutage, started: float, ended: str) -> float:
        """The hold's line for the summary; returns how long it held."""
        held_s = time.monotonic() - started
        spilled = f", events spilled to {outage.spill}" if outage.spill else ""
        self.held.append(
            f"{outage_words(outage.cause)} since {outage.since.astimezone():%H:%M:%S}:"
            f" held {held_s:.1f} s, {ended}{spilled}"
        )
        return held_s


def stop_words(outage: JournalOutage, bound: float) -> str:
    """The stop's detail: "store unreachable for 120 s (…): stopped rather than act
    unrecorded"."""
    what = outage_words(outage.cause)
    return f"{what} for {bound:g} s ({outage.detail}): stopped rather than act unrecorded"
