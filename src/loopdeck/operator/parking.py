"""A run that waits on its operator holds no worker: past `LOOPDECK_PARK_AFTER_S` of waiting
(each wait timed from its own start) for a write's approval, for an answer that has no
deadline of its own, or for its resume (a pause holds it where stops land), its worker parks
it (`store/leases.py`): what it did is committed, its slot freed, its runtime stopped here
without a word of it in the log. The decision, when it lands (in the store, as any decision
does), makes it claimable; a free worker rebuilds it from its log and finds the decision
there. A request that expires, or a command sent to it (a resume, a cancel, a message), makes
it claimable too: its runtime takes them. A run parked as paused only a command wakes: a
decision taken while it is paused waits for its resume, as its next model call would. (One
parked on its approval and paused meanwhile is still woken by its request's expiry, decided
or not, and runs the approved write as a live paused run would.)

A run whose env keeps its state in the worker's memory (no `reopen`), or whose agent drives
its own loop, is not watched: no other worker could rebuild it (`leased_run.py`).

The check and the let-go are one step of the event loop: a run whose decision came in the
meantime is not parked (it acts on it), and one that is parked acts on nothing more.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

from loopdeck.core.events import Event, QuestionAsked, StateChanged
from loopdeck.core.replay_log import ReplayLog
from loopdeck.core.runtime import Runtime
from loopdeck.core.states import RunState
from loopdeck.store import leases

CHECK_S = 0.2
WAITS = (RunState.AWAITING_APPROVAL, RunState.AWAITING_ANSWER)
# Lets the run go as parked (its note, its request's expiry) if `still` holds at that moment.
LetGo = Callable[[str, str, float | None, Callable[[], bool]], Awaitable[bool]]


class Parking:
    """Watches one run in a worker; parks it once it has waited long enough."""

    def __init__(
        self, runtime: Runtime, replay: ReplayLog | None, host: str, let_go: LetGo,
        *, decisions: bool = True,
    ) -> None:  # fmt: skip
        self.runtime = runtime
        self.decisions = decisions  # its approvals and answers are the store's to wait for
        self.replay = replay
        self.host = host
        self.let_go = let_go
        self.after_s = leases.park_after_s()
        # What keeps it here though it waited long enough: a push of its decision owed
        # (`operator/worker_pushes.py`): once parked, no process of it pushes anything.
        self.holds: list[Callable[[], bool]] = []
        asked = None if replay is None else replay.last_of(QuestionAsked)
        self.question: QuestionAsked | None = asked
        self._began = asyncio.Event()
        if replay is not None:  # rebuilt while it waits: the watch wakes as it goes live
            replay.on_live.append(self._began.set)
        runtime.control.on_pause_hold.append(self._began.set)

    def seen(self, event: Event) -> None:
        """A bus subscriber: the question the run asks, if it asks one; a wait that begins
        wakes the watch."""
        if isinstance(event, QuestionAsked):
            self.question = event
        elif isinstance(event, StateChanged) and event.target in WAITS:
            self._began.set()

    def waiting(self) -> tuple[str, float | None] | None:
        """What the run waits on its operator for, and until when its request holds; None:
        it does not, or not in a way a parked run can be woken from."""
        if self.replay is not None and not self.replay.live:
            return None
        if self.decisions and (decision := self._decision()) is not None:
            return decision
        if self.runtime.control.pause_holds:
            return "its resume (paused)", None
        return None

    def _decision(self) -> tuple[str, float | None] | None:
        state = self.runtime.machine.state
        pending = self.runtime.calls.approvals.pending
        if state is RunState.AWAITING_APPROVAL and pending is not None:
            return f"{pending.call_id}'s approval", pending.expires_at.timestamp()
        question = self.question
        if state is RunState.AWAITING_ANSWER and question is not None and question.acts_at is None:
            return f"an answer to {question.question_id}", None
        return None

    async def watch(self) -> None:
        """Until the run is parked (or this task is cancelled: the run ended). Asleep while
        the run does not wait on its operator: a worker watches hundreds of runs."""
        since: float | None = None
        waited: tuple[str, float | None] | None = None
        while True:
            if since is None and self.waiting() is None:
                self._began.clear()
                await self._began.wait()
            await asyncio.sleep(CHECK_S)
            what = self.waiting()
            if what is None:
                since = None
                continue
            if since is None or what != waited:  # a wait begins (the next write's, even one
                since, waited = time.monotonic(), what  # begun and seen within one check)
            if time.monotonic() - since < self.after_s or any(hold() for hold in self.holds):
                continue
            note = f"parked by {self.host}: waits for {what[0]}"
            parked = await self.let_go(leases.PARKED, note, what[1], self._still(what))
            if parked:
                return
            since = waited = None

    def _still(self, what: tuple[str, Any]) -> Callable[[], bool]:
        return lambda: self.waiting() == what
