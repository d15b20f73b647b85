"""The operator's say on a detected loop. With an operator attached, a repeated call is put to
them: `stop` (the run ends `no_progress`), `allow` (it runs once, recorded as allowed by them;
not offered for a write that already ran, which would only be refused as a duplicate) or
`nudge TEXT` (blocked, the executor goes on with their message). An answer not understood is
said so and asked again. No answer in `RunConfig.loop_answer_s` (all asks together), or no
operator: the guard does what it always did."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Literal, Protocol

from loopdeck.core.approvals import Answer, Answerer
from loopdeck.core.budget_answer import takes_no_words
from loopdeck.core.config import RunConfig
from loopdeck.core.questions import Asking

Say = Literal["stop", "allow", "nudge", "default", "?"]
TITLE = "The guard stopped a repeat"


class LoopHost(Protocol):
    config: RunConfig
    answerer: Answerer | None

    async def ask_operator(
        self,
        question: str,
        topic: str = "ask_user",
        timeout_s: float | None = None,
        asking: Asking = ...,
    ) -> Answer | None: ...


@dataclass(frozen=True, slots=True)
class Repeat:
    """The repeated call as the operator sees it: `call` ("c5 get_status()"), its fingerprint,
    the state it repeats in, the earlier identical call and what it returned, and whether
    allowing it once can run it (False for a write that already ran)."""

    call: str
    fingerprint: str
    state_hash: str
    earlier: str | None = None
    earlier_result: str = ""
    can_allow: bool = True

    def choices(self) -> tuple[str, ...]:
        return ("stop", "allow", "nudge") if self.can_allow else ("stop", "nudge")

    def evidence(self) -> tuple[tuple[str, str], ...]:
        rows = [("repeated call", self.call), ("fingerprint", self.fingerprint)]
        rows.append(("state", self.state_hash))
        if self.earlier:
            rows.append(("earlier identical call", self.earlier))
            rows.append(("its result", self.earlier_result or "—"))
        if not self.can_allow:
            rows.append(("allow", "not offered: this write already ran, it would be refused"))
        return tuple(rows)


def parse_say(text: str, can_allow: bool = True) -> tuple[Say, str]:
    """What the operator said; ("?", "") for anything not understood (an `allow` that cannot
    run included, and a `stop` or `allow` with words after it: only `nudge` takes words)."""
    words = text.strip().split(maxsplit=1)
    first = words[0].lower() if words else ""
    if first in ("stop", "s") and len(words) == 1:
        return "stop", ""
    if first in ("allow", "a") and can_allow and len(words) == 1:
        return "allow", ""
    if first in ("nudge", "n") and len(words) == 2:
        return "nudge", words[1].strip()
    return "?", ""


def _not_understood(text: str, can_allow: bool) -> str:
    words = text.strip().split(maxsplit=1)
    first = words[0].lower() if words else ""
    if first in ("allow", "a") and not can_allow:
        return "`allow` is not offered: this write already ran and would be refused."
    if first in ("stop", "s", "allow", "a") and len(words) == 2:
        return f"{takes_no_words(first, ' (to tell the model something, `nudge TEXT`)')}."
    return f"Not understood: {text.strip()[:200]!r}."


def _question(repeat: Repeat) -> str:
    same = f", the same as {repeat.earlier}" if repeat.earlier else ""
    allow = "`allow` (run it once), " if repeat.can_allow else ""
    return (
        f"{repeat.call} repeats a call from the same state (fingerprint {repeat.fingerprint}, "
        f"state {repeat.state_hash}{same}). Answer `stop` (end no_progress), {allow}or "
        f"`nudge TEXT` (block it and tell the model TEXT)."
    )


async def operator_on_loop(host: LoopHost, repeat: Repeat) -> tuple[Say, str, str]:
    """(what to do, the nudge's text, who said it); "default" when nobody answered."""
    if host.answerer is None:
        return "default", "", ""
    asking = Asking(title=TITLE, choices=repeat.choices(), evidence=repeat.evidence())
    question = _question(repeat)
    ends = time.monotonic() + host.config.loop_answer_s
    while (left := ends - time.monotonic()) > 0:
        answer = await host.ask_operator(question, "loop", left, asking)
        if answer is None:
            break
        say, text = parse_say(answer.text, repeat.can_allow)
        if say != "?":
            return say, text, answer.by
        question = f"{_not_understood(answer.text, repeat.can_allow)} {_question(repeat)}"
    return "default", "", ""
