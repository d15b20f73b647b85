"""The operator's messages to the agent, at any time: taken as they come (`OperatorMessage`:
who, when, the text), heard by the model before its next turn as the operator's words, never
as a tool result. A message that arrives while a model call is in flight waits for the next
one; one that arrives inside a batch waits until all of the batch's results are in."""

from __future__ import annotations

from loopdeck.core.events import Emit, OperatorMessage
from loopdeck.core.text import capped, escape_surrogates

# What the model is given of one message; the event holds the same capped text.
MESSAGE_CAP = 4000
# The earlier messages a new planner or a new round's executor is reminded of, newest kept.
HEARD_KEPT = 20


class OperatorMessages:
    """The run's messages from its operator: those not heard yet, and those heard."""

    def __init__(self, emit: Emit, run_id: str) -> None:
        self._emit = emit
        self._run_id = run_id
        self._waiting: list[str] = []
        self._said: set[int] = set()  # which of those waiting are messages (not notes)
        self.heard: list[str] = []

    def say(self, text: str, by: str) -> None:
        """The operator's message, recorded now; the model hears it before its next turn."""
        text = capped(escape_surrogates(text), MESSAGE_CAP)
        self._emit(OperatorMessage, run_id=self._run_id, text=text, by=by)
        self._said.add(len(self._waiting))
        self._waiting.append(text)

    def note(self, text: str) -> None:
        """Words for the model before its next turn whose record is another event's (an
        unknown outcome resolved: `OutcomeResolved`)."""
        self._waiting.append(text)

    @property
    def waiting(self) -> list[str]:
        """Everything the model hears before its next turn: messages and notes, in order."""
        return list(self._waiting)

    def unheard(self) -> list[str]:
        """The operator's messages the model has not heard yet (at the stop: never will)."""
        return [text for i, text in enumerate(self._waiting) if i in self._said]

    def take(self) -> list[str]:
        """The messages not heard yet, in order; from now on they count as heard."""
        taken, self._waiting = self._waiting, []
        self._said = set()
        self.heard = (self.heard + taken)[-HEARD_KEPT:]
        return taken
