"""Auto-pause (`pause_at`): when a budget crosses that fraction of its cap and an operator is
attached, the run stops before its next model call and asks: continue, raise the cap for this
run, or stop. Headless with no operator nothing changes: the cap itself stops the run."""

from __future__ import annotations

from typing import Protocol

from loopdeck.core.approvals import Answer, Answerer
from loopdeck.core.budgets import BudgetLedger, Cap
from loopdeck.core.config import RunConfig
from loopdeck.core.control import StopRun
from loopdeck.core.questions import Asking
from loopdeck.core.states import StopReason
from loopdeck.core.text import number

CHOICES = "answer `continue`, `raise N` (a new cap for this run) or `stop`"
MAX_ASKS = 3


class PauseHost(Protocol):
    config: RunConfig
    ledger: BudgetLedger
    answerer: Answerer | None

    async def ask_operator(
        self,
        question: str,
        topic: str = "ask_user",
        timeout_s: float | None = None,
        asking: Asking = ...,
    ) -> Answer | None: ...
    def publish_budget(self) -> None: ...
    def rearm_deadline(self) -> None: ...


def parse_choice(text: str) -> tuple[str, float | None]:
    """("continue" | "stop" | "raise", new cap) or ("?", None) for anything else."""
    words = text.strip().lower().split()
    if not words or words[0] in ("continue", "c", "go", "yes"):
        return "continue", None
    if words[0] in ("stop", "s"):
        return "stop", None
    if words[0] in ("raise", "r") and len(words) == 2:
        try:
            return "raise", float(words[1].replace(",", ""))
        except ValueError:
            return "?", None
    return "?", None


class BudgetPause:
    def __init__(self, host: PauseHost) -> None:
        self.rt = host
        self.asked: set[Cap] = set()

    async def check(self) -> None:
        rt = self.rt
        fraction = rt.config.pause_at
        if fraction is None or rt.answerer is None:
            return
        while crossed := rt.ledger.crossed(fraction, self.asked):
            cap, used, limit = crossed
            self.asked.add(cap)
            question = (
                f"The {cap.label} budget is at {used / limit:.0%} of its cap ({number(used)} of "
                f"{number(limit)}), past the pause point {fraction:.0%}. Continue, raise the cap "
                f"for this run, or stop? ({CHOICES})"
            )
            asking = Asking(
                title=f"Budget: {used / limit:.0%} of {cap.label} used",
                choices=("continue", "raise", "stop"),
                evidence=(
                    ("budget", cap.label),
                    ("used", f"{number(used)} of {number(limit)} ({used / limit:.0%})"),
                    ("pause point", f"{fraction:.0%}"),
                    ("raise", f"a new cap above {number(used)}"),
                    ("no answer", "the run waits for you, with no time limit"),
                ),
            )
            await self._decide(cap, used, question, asking)

    async def _decide(self, cap: Cap, used: float, question: str, asking: Asking) -> None:
        rt = self.rt
        for _ in range(MAX_ASKS):
            answer = await rt.ask_operator(question, "budget", None, asking)
            if answer is None:
                return
            choice, value = parse_choice(answer.text)
            if choice == "continue":
                return
            if choice == "stop":
                raise StopRun(
                    StopReason.CANCELLED,
                    f"stopped by {answer.by} when the {cap.label} budget paused the run",
                )
            if choice == "raise" and value is not None and value > used:
                rt.ledger.raise_cap(cap, value)
                if cap is Cap.DEADLINE:
                    rt.rearm_deadline()
                rt.publish_budget()
                fraction = rt.config.pause_at or 1.0
                if used / rt.ledger.budget.limit(cap) < fraction:
                    self.asked.discard(cap)  # it may pause again near the new cap
                return
            question = (
                f"Not understood: {answer.text!r}. {CHOICES}; the cap must be above {number(used)}."
            )
        # No usable answer after the asks: go on, the cap itself still stops the run.
