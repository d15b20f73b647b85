"""The end of a gateway run, once its agent has exited: the goal check decides. Met: `goal_met`;
not met: `stalled` with the check's findings (`tool_failure` when the agent failed, its exit
and its output's tail said). The agent's own claim of success never decides.

With nothing to check the goal (`loopdeck gateway` without `--check`), an attached operator is
asked: `accept` (or `accept: WHY`) is `goal_met` on their word; anything else is `stalled`
with their words as the finding. Nobody to ask: `ask_user`.
"""

from __future__ import annotations

import re
from typing import Any, NoReturn

from loopdeck.core.canonical import short_hash
from loopdeck.core.control import StopRun
from loopdeck.core.events import ReviewVerdict
from loopdeck.core.questions import Asking
from loopdeck.core.run_host import RunHost
from loopdeck.core.states import RunState, StopReason
from loopdeck.core.text import capped
from loopdeck.gateway.agent_process import AgentProcess

ACCEPT = re.compile(r"(?is)^\s*accept(?:ed)?\b[\s:,;.!-]*(.*)$")
QUESTION = (
    "The agent has exited; nothing checks the goal. Answer `accept` (or `accept: WHY`) if it"
    " is met, or say what is left (the run stops stalled, your words its finding)."
)


async def judged(
    host: RunHost,
    before: dict[str, Any],
    status: int,
    agent: AgentProcess | None,
    unchecked: str | None,
) -> NoReturn:
    host.move(RunState.DECIDING)  # from wherever its last call left it (none: ready)
    if unchecked is not None:
        await _operator_judges(host, before, status, unchecked)
    verdict = await host.review_round(before)
    if verdict.kind == "pass":
        raise StopRun(StopReason.GOAL_MET, f"the goal check passed once the agent ended ({status})")
    reasons = "; ".join(verdict.reasons)
    if status != 0 and agent is not None:
        said = agent.said(f"exited with status {status}")
        raise StopRun(StopReason.TOOL_FAILURE, f"{said}; the goal check says: {reasons}")
    raise StopRun(StopReason.STALLED, f"the agent exited; the goal check says: {reasons}")


async def _operator_judges(
    host: RunHost, before: dict[str, Any], status: int, unchecked: str
) -> NoReturn:
    if not host.has_operator:
        raise StopRun(StopReason.ASK_USER, unchecked)
    evidence = (
        ("goal", capped(host.config.goal, 300)),
        ("the agent", f"exited with status {status}"),
        ("no answer", "the run waits for you, with no time limit"),
    )
    asking = Asking(title="The agent has exited: is the goal met?", evidence=evidence)
    answer = await host.ask_operator(QUESTION, "ask_user", asking)
    if answer is None or not answer.text.strip():
        raise StopRun(StopReason.ASK_USER, f"{unchecked}, and no answer said it")
    accepted = ACCEPT.match(answer.text)
    word = f"{'accepted' if accepted else 'not accepted'} by {answer.by}"
    said = (accepted.group(1) if accepted else answer.text).strip()
    finding = word + (f": {capped(said, 500)}" if said else "")
    host.finding(finding)
    if not accepted:
        raise StopRun(StopReason.STALLED, f"the agent exited; {finding}")
    after = await host.snapshot()
    host.move(RunState.REVIEWING)
    host.emit(
        ReviewVerdict, run_id=host.run_id, round=host.round, verdict="pass", reasons=[finding],
        before_hash=short_hash(before), after_hash=short_hash(after),
    )  # fmt: skip
    raise StopRun(StopReason.GOAL_MET, f"the goal is met on the operator's word ({finding})")
