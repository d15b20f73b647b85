"""A worker's hold on one run (`Lease`), as its heartbeat last confirmed it: checked before
every model call and tool (`ensure`), lost at once when the store names another holder, or
given up once no renewal reached the store for the run's `store_hold_s`."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable

from loopdeck.core.config import RunConfig
from loopdeck.core.control import Interrupted
from loopdeck.core.states import StopReason

ENSURE_POLL_S = 0.05
STORE_HOLD_S = RunConfig.model_fields["store_hold_s"].default  # a run's own, once prepared


class Lease:
    """This worker's hold on one run, as its heartbeat last confirmed it."""

    def __init__(self, run_id: str, epoch: int, hold_s: float) -> None:
        self.run_id, self.epoch, self.hold_s = run_id, epoch, hold_s
        self.outage_s = STORE_HOLD_S  # how long unconfirmed before it is given up (the run's)
        self.since = time.monotonic()
        self.valid_until = self.since + hold_s
        self.lost: str | None = None
        self.on_lost: Callable[[str], None] = lambda why: None
        self._loop = asyncio.get_running_loop()

    def renewed(self, at: float) -> None:
        """Confirmed by a renewal begun at `at` (monotonic)."""
        self.valid_until = max(self.valid_until, at + self.hold_s)

    def lose(self, why: str) -> None:
        """From any thread: the run is not this worker's any more."""
        if self.lost is None:
            self.lost = why
            with contextlib.suppress(RuntimeError):  # the loop is gone: so is everything
                self._loop.call_soon_threadsafe(self.on_lost, why)

    async def ensure(self) -> None:
        """Before acting: the lease holds, or the next renewal says it does; else the run
        stops here (`Interrupted`), acting on nothing. While no renewal reaches the store (it
        is down) the run waits, acting on nothing: once one does, the store says whether the
        run is still this worker's (nobody claimed it meanwhile) or another's; past the run's
        `store_hold_s` of waiting it is given up."""
        while True:
            if self.lost is not None:
                raise Interrupted(StopReason.KILLED, f"lease lost: {self.lost}")
            now = time.monotonic()
            if now < self.valid_until:
                return
            if now > self.valid_until + self.outage_s:
                self.lose(f"no renewal reached the store for {self.outage_s:.0f}s")
                continue
            await asyncio.sleep(ENSURE_POLL_S)
