"""A run's door in the gateway: the model calls its agent makes (each with the token made for
the run), queued for the run's own task, which decides each and settles it; and how the door
answers once the run is stopping or over, without the run: a final message (a stop: the agent
is told to end), or a refusal (a kill, a budget's cap, a run that has ended).

A refusal is HTTP 400 in the agent's format. The agents retry what they take for a passing
fault: 429 and 5xx (Claude Code for minutes, with backoff; the `openai` SDK twice), so a cap
or a kill said with them would be asked again and again. 403 is not retried, but Claude Code
prints it as "Failed to authenticate", sending its user after a key. 400 is printed as it is
("API Error: 400 <our message naming the cap>") and ends the agent; Claude Code re-sends it
up to six times within a second first, each answered here by the closed door, never upstream,
so none is a call past the cap.

The server's handlers only submit calls and wait for their outcome; everything the run does
with a call happens in the run's task, where stops, budgets and approvals work as in any run.
"""

from __future__ import annotations

import asyncio
import secrets
from dataclasses import dataclass, field

from loopdeck.gateway.answer import ApiFormat, Body

REFUSED = "loopdeck_refused"  # the error's type an agent sees for a call loopdeck refuses
REFUSED_STATUS = 400  # not retried, printed as said (see above: 403, 429 and 5xx are not)


def new_token() -> str:
    return "ldg-" + secrets.token_urlsafe(24)


@dataclass(frozen=True)
class Outcome:
    """How a call is answered: the decided answer, or an error (its HTTP status, its type,
    code and message, in the agent's format)."""

    answer: Body | None = None
    status: int = 200
    kind: str = ""
    message: str = ""
    headers: dict[str, str] = field(default_factory=dict)  # an upstream's `retry-after`
    code: str | None = None  # the OpenAI formats' `code` (None: the type's)


@dataclass
class ModelCall:
    api: ApiFormat
    body: Body
    stream: bool
    headers: dict[str, str] = field(default_factory=dict)
    answered: asyncio.Future[Outcome] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )
    gone: asyncio.Event = field(default_factory=asyncio.Event)  # the agent's connection closed
    released: list[str] = field(default_factory=list)  # the tool uses its answer released

    def settle(self, outcome: Outcome) -> None:
        if not self.answered.done():
            self.answered.set_result(outcome)

    def refuse(
        self,
        message: str,
        status: int = REFUSED_STATUS,
        kind: str = REFUSED,
        headers: dict[str, str] | None = None,
        code: str | None = None,
    ) -> None:
        self.settle(
            Outcome(status=status, kind=kind, message=message, headers=headers or {}, code=code)
        )


@dataclass(frozen=True)
class Lost:
    """A call whose answer was settled but never reached its agent (its connection closed
    first): told to the run, which records it in its own task."""

    call: ModelCall


@dataclass(frozen=True)
class Closing:
    """How a door answers once its run no longer decides calls: `final` a text answer telling
    the agent to end (a stop), else a refusal saying `message`; `grace`: the agent is given
    its grace to exit on its own (to show what it was told) before its process group is
    ended, rather than at once (a kill)."""

    message: str
    final: bool = False
    grace: bool = False

    def answer(self, call: ModelCall, model: str) -> None:
        if self.final:
            call.settle(Outcome(answer=call.api.final(self.message, model)))
        else:
            call.refuse(self.message)


class Door:
    def __init__(self, model: str, token: str | None = None) -> None:
        self.token = token or new_token()
        self.model = model  # the upstream's, named in a final message's answer
        self.queue: asyncio.Queue[ModelCall | Lost] = asyncio.Queue()
        self.closing: Closing | None = None

    def submit(self, call: ModelCall) -> None:
        if self.closing is not None:
            self.closing.answer(call, self.model)
        else:
            self.queue.put_nowait(call)

    def lost(self, call: ModelCall) -> None:
        """`call`'s answer, settled, did not reach its agent: the run is told (a run that
        no longer decides has nothing left to record)."""
        if self.closing is None:
            self.queue.put_nowait(Lost(call))

    def losses(self) -> list[ModelCall]:
        """The lost answers told and not yet taken, taken; the calls queued stay queued."""
        items = [self.queue.get_nowait() for _ in range(self.queue.qsize())]
        for item in items:
            if isinstance(item, ModelCall):
                self.queue.put_nowait(item)
        return [item.call for item in items if isinstance(item, Lost)]

    def close(self, closing: Closing) -> None:
        """From now on every call is answered by `closing`, those waiting too."""
        self.closing = closing
        while not self.queue.empty():
            if isinstance(item := self.queue.get_nowait(), ModelCall):
                closing.answer(item, self.model)
