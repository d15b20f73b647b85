"""The operator's word on a goal nothing checks (`loopdeck acp` without `--check`, an `[agent]`
env without `goal_check`): after each turn the run asks an attached operator whether the goal
is met. `accept` (or `accept: WHY`) stops the run `goal_met`, their word its finding; `stop`
stops it `cancelled`; any other words are what is left, the agent's next prompt. With nobody
to ask, the run stops `ask_user`: the agent's own claim never ends a run."""

from __future__ import annotations

import re
from typing import Any, Literal, NoReturn

from loopdeck.core.canonical import short_hash
from loopdeck.core.control import StopRun
from loopdeck.core.events import ReviewVerdict
from loopdeck.core.questions import Asking
from loopdeck.core.run_host import RunHost
from loopdeck.core.states import RunState, StopReason
from loopdeck.core.text import capped
from loopdeck.core.workspace_changes import changes_between, files_of

QUESTION = (
    "The agent ended its turn; nothing checks the goal. Accept (goal met on your word), say"
    " what is left (the next prompt), or stop."
)
HOW = "Answer `accept` (or `accept: WHY`), `stop`, or what is left to do."
TITLE = "The agent ended its turn: is the goal met?"
MAX_ASKS = 3
_ACCEPT = re.compile(r"(?is)^\s*(?:accept(?:ed)?\b|a\s*$)[\s:,;.!—-]*(.*)$")
_STOP = re.compile(r"(?i)^\s*(?:stop|s)[\s.!]*$")

Word = Literal["accept", "stop", "prompt", "?"]


def parse_word(text: str) -> tuple[Word, str]:
    """What the operator said: accept (with their reason), stop, the next prompt, or "?"
    (nothing said)."""
    if not text.strip():
        return "?", ""
    if (accepted := _ACCEPT.match(text)) is not None:
        return "accept", accepted.group(1).strip()
    if _STOP.match(text):
        return "stop", ""
    return "prompt", text.strip()


def changed_files(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    changes = changes_between(files_of(before), files_of(after))
    return sorted([*changes.added, *changes.changed, *changes.removed])


def _asking(host: RunHost, turn_end: str, said: str, changed: list[str]) -> Asking:
    files = ", ".join(changed[:8]) + (f" and {len(changed) - 8} more" if len(changed) > 8 else "")
    return Asking(
        title=TITLE,
        evidence=(
            ("goal", capped(host.config.goal, 300)),
            ("turn", f"round {host.round}, ended {turn_end}"),
            ("the agent said", capped(said.strip(), 300) or "—"),
            ("files changed this turn", files or "none"),
            ("accept", "the run stops goal_met, your words its finding"),
            ("no answer", "the run waits for you, with no time limit"),
        ),
    )


async def operator_judges(
    host: RunHost, before: dict[str, Any], turn_end: str, said: str, unchecked: str
) -> str:
    """The next prompt, in the operator's words; raises `StopRun` on accept, stop, or with
    nobody to ask (`unchecked`: why)."""
    if not host.has_operator:
        raise StopRun(StopReason.ASK_USER, unchecked)
    after = await host.snapshot()
    asking = _asking(host, turn_end, said, changed_files(before, after))
    question = f"{QUESTION} {HOW}"
    for _ in range(MAX_ASKS):
        host.move(RunState.DECIDING)
        answer = await host.ask_operator(question, "ask_user", asking)
        if answer is None:
            break
        word, text = parse_word(answer.text)
        if word == "accept":
            word_on = f"accepted by {answer.by}" + (f": {text}" if text else "")
            _accepted(host, before, after, word_on)
        if word == "stop":
            raise StopRun(
                StopReason.CANCELLED, f"stopped by {answer.by} when the agent ended its turn"
            )
        if word == "prompt":
            return text
        question = f"Nothing said. {QUESTION} {HOW}"
    raise StopRun(StopReason.ASK_USER, f"{unchecked}, and no answer said it")


def _accepted(host: RunHost, before: dict[str, Any], after: dict[str, Any], word: str) -> NoReturn:
    host.move(RunState.REVIEWING)
    host.emit(
        ReviewVerdict,
        run_id=host.run_id,
        round=host.round,
        verdict="pass",
        reasons=[word],
        before_hash=short_hash(before),
        after_hash=short_hash(after),
    )
    host.finding(word)
    raise StopRun(StopReason.GOAL_MET, f"the goal is met on the operator's word ({word})")
