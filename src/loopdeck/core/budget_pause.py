"""Auto-pause (`pause_at`): when a budget crosses that fraction of its cap and an operator is
attached, the run stops before its next model call and asks: continue, raise the cap for this
run, or stop. Headless with no operator nothing changes: the cap itself stops the run."""

from __future__ import annotations

from typing import Protocol

from loopdeck.core.approvals import Answer, Answerer
from loopdeck.core.budget_answer import CHOICES, read_answer
from loopdeck.core.budgets import BudgetLedger, Cap
from loopdeck.core.config import RunConfig
from loopdeck.core.control import StopRun
from loopdeck.core.questions import Asking
from loopdeck.core.states import StopReason
from loopdeck.core.text import capped, number

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
                cap=cap,
                used=used,
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
            said = read_answer(answer.text, cap, used)
            if isinstance(said, str):
                question = f"Not understood: {capped(answer.text, 200)!r}: {said}; {CHOICES}."
                continue
            if said.choice == "continue":
                return
            if said.choice == "stop":
                raise StopRun(
                    StopReason.CANCELLED,
                    f"stopped by {answer.by} when the {cap.label} budget paused the run",
                )
            rt.ledger.raise_cap(cap, said.new_cap)
            if cap is Cap.DEADLINE:
                rt.rearm_deadline()
            rt.publish_budget()
            fraction = rt.config.pause_at or 1.0
            if used / rt.ledger.budget.limit(cap) < fraction:
                self.asked.discard(cap)  # it may pause again near the new cap
            return
        # No usable answer after the asks: go on, the cap itself still stops the run.
