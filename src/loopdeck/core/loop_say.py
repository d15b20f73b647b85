"""The operator's say on a detected loop. With an operator attached, a repeated call is put to
them: `stop` (the run ends `no_progress`), `allow` (it runs once, recorded as allowed by them)
or `nudge TEXT` (blocked, the executor goes on with their message). No answer in
`RunConfig.loop_answer_s`, or no operator: the guard does what it always did."""

from __future__ import annotations

from typing import Literal, Protocol

from loopdeck.core.approvals import Answer, Answerer
from loopdeck.core.config import RunConfig

Say = Literal["stop", "allow", "nudge", "default"]


class LoopHost(Protocol):
    config: RunConfig
    answerer: Answerer | None

    async def ask_operator(
        self, question: str, topic: str = "ask_user", timeout_s: float | None = None
    ) -> Answer | None: ...


def parse_say(text: str) -> tuple[Say, str]:
    words = text.strip().split(maxsplit=1)
    first = words[0].lower() if words else ""
    if first in ("stop", "s"):
        return "stop", ""
    if first in ("allow", "a"):
        return "allow", ""
    if first in ("nudge", "n") and len(words) == 2:
        return "nudge", words[1].strip()
    return "default", ""


async def operator_on_loop(
    host: LoopHost, call: str, fingerprint: str, state_hash: str, earlier: str | None
) -> tuple[Say, str, str]:
    """(what to do, the nudge's text, who said it)."""
    if host.answerer is None:
        return "default", "", ""
    same = f", the same as {earlier}" if earlier else ""
    question = (
        f"{call} repeats a call from the same state (fingerprint {fingerprint}, state "
        f"{state_hash}{same}). Answer `stop` (end no_progress), `allow` (run it once) or "
        f"`nudge TEXT` (block it and tell the model TEXT)."
    )
    try:
        answer = await host.ask_operator(question, "loop", host.config.loop_answer_s)
    except TimeoutError:  # pragma: no cover - ask_operator turns it into None
        answer = None
    if answer is None:
        return "default", "", ""
    say, text = parse_say(answer.text)
    return say, text, answer.by
