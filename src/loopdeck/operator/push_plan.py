"""When a run's decisions are pushed: pure, on a clock it is handed, so a day of asks can be
played in a test in a second.

Every decision the run waits on (one ask of a write, a question, an unknown outcome) is
`Waiting` from when it was asked, and due `after_s` later. A push carries only decisions that
are due, so one taken in time is never pushed. Decisions that come together (within
`gather_s` of the oldest not yet pushed) go in one push, sent once the last of them is due;
a run's pushes are at least `gap_s` apart (never a flood); a decision is pushed once. A push
no channel took is tried again `after_s` later, `TRIES` times in all.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from loopdeck.core.push_events import PushedDecision
from loopdeck.operator.push_words import Asked

TRIES = 3
SHORTEST_GAP_S = 10.0  # between two pushes of one run, whatever --notify-after says
GATHER_S = 10.0  # asks this close to the oldest waiting one go in its push


@dataclass
class Waiting:
    """A decision the run waits on: `key` names its ask (a call asked again is another)."""

    key: str
    asked: Asked
    ask: str  # which ask of the call, as its link's token names it
    since: float
    due: float
    tries: int = 0
    pushed: bool = False


@dataclass
class PushPlan:
    after_s: float
    waiting: dict[str, Waiting] = field(default_factory=dict)
    last_push: float | None = None
    pushes: int = 0

    @property
    def gap_s(self) -> float:
        return max(self.after_s, SHORTEST_GAP_S)

    @property
    def gather_s(self) -> float:
        return min(self.after_s, GATHER_S)

    def add(self, key: str, asked: Asked, ask: str, now: float) -> None:
        """A decision asked now; an earlier ask of the same call is settled by it."""
        self.settle(asked.call_id)
        self.waiting[key] = Waiting(key, asked, ask, now, now + self.after_s)

    def settle(self, call_id: str) -> list[Waiting]:
        """The call's decision was taken or withdrawn: nothing of it is pushed any more; its
        asks that were, returned."""
        gone = [w for w in self.waiting.values() if w.asked.call_id == call_id]
        for waiting in gone:
            del self.waiting[waiting.key]
        return [w for w in gone if w.pushed]

    def batch(self, now: float) -> list[Waiting]:
        """What to push now: every decision due and not yet pushed, once `wake` has come."""
        wake = self.wake()
        if wake is None or now < wake:
            return []
        due = [w for w in self.waiting.values() if not w.pushed and w.due <= now]
        return sorted(due, key=lambda w: w.since)

    def wake(self) -> float | None:
        """When the next push goes, if ever: once the oldest decision not yet pushed and those
        asked within `gather_s` of it are all due, and the last push is `gap_s` behind."""
        unpushed = [w for w in self.waiting.values() if not w.pushed]
        if not unpushed:
            return None
        first = min(w.since for w in unpushed)
        due = max(w.due for w in unpushed if w.since <= first + self.gather_s)
        return due if self.last_push is None else max(due, self.last_push + self.gap_s)

    def sending(self, batch: list[Waiting], now: float) -> None:
        """`batch` goes out now: none of it is pushed again, unless its push fails."""
        self.last_push = now
        for waiting in batch:
            waiting.pushed = True
            waiting.tries += 1

    def sent(self, batch: list[Waiting], now: float, *, took: bool) -> None:
        """The push of `batch` went (a channel took it), or not: then each of it still
        waiting is tried again `after_s` later, up to `TRIES` times in all."""
        if took:
            self.pushes += 1
            return
        for waiting in batch:
            if waiting.key in self.waiting and waiting.tries < TRIES:
                waiting.pushed = False
                waiting.due = now + self.after_s

    def pushed_before(self, decisions: list[PushedDecision], at: float) -> None:
        """Decisions a push went out `at` for before this plan knew of it (another worker's,
        read from the run's log): not pushed again, and the next push `gap_s` after it. A push
        names the ask it was for; one recorded before it did is matched by its call and what
        it is."""
        self.last_push = at if self.last_push is None else max(self.last_push, at)
        for waiting in self._of(decisions):
            waiting.pushed = True

    def failed_before(self, decisions: list[PushedDecision], at: float) -> None:
        """Decisions a push no channel took was for `at`, before this plan knew of it: that
        try counts among their `TRIES` and the next is `after_s` after it, as here; one tried
        that often is not tried again."""
        self.last_push = at if self.last_push is None else max(self.last_push, at)
        for waiting in self._of(decisions):
            waiting.tries += 1
            waiting.pushed = waiting.pushed or waiting.tries >= TRIES
            waiting.due = max(waiting.due, at + self.after_s)

    def _of(self, decisions: list[PushedDecision]) -> list[Waiting]:
        asks = {(d.call_id, d.what, d.ask) for d in decisions}
        return [
            w for w in self.waiting.values()
            if (w.asked.call_id, w.asked.what, w.ask) in asks
            or (w.asked.call_id, w.asked.what, "") in asks
        ]  # fmt: skip

    def pushed_waiting(self) -> list[Waiting]:
        """The decisions pushed and still waiting (their links live until taken)."""
        return [w for w in self.waiting.values() if w.pushed]
