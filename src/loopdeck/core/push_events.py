"""The events of a push: decisions the run waits on, sent to the operator's channels
(`--notify`) because nobody took them in time. Recorded by the run's own process as what
happened, so every console, the transcript, an export and the fleet's inbox see what was
pushed and where: `decisions_pushed` when a channel took it (or may have: its receiver took
the request and never answered), `push_failed` when none did (it is tried again)."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict

from loopdeck.core.event_base import EventBase

# What a pushed decision is: a write's approval, a question (the agent's, the guard's, a
# budget's pause), or the word on a write whose outcome is unknown.
PushedWhat = Literal["approval", "question", "outcome"]


class PushedDecision(BaseModel):
    """One decision in a push: its id (a call's, a question's), what it is, until when its
    one-time link decides (None: the push carried no link, only the CLI command), and which
    ask of it the push was for (a write asked again is another ask; "" in a push recorded
    before the ask was)."""

    model_config = ConfigDict(frozen=True)

    call_id: str
    what: PushedWhat
    link_until: datetime | None = None
    ask: str = ""


class DecisionsPushed(EventBase):
    """One push: the decisions it carried, the channels that took it (by their kind, `ntfy`,
    `slack`, `json`: never their URL, which may hold a token), those that did not and why,
    and the server its links point at ("" when it carried none). `channels` is empty only
    for a push its receivers took and never answered (each said among `failed`), or one
    recorded before `push_failed` was."""

    kind: Literal["decisions_pushed"] = "decisions_pushed"
    decisions: list[PushedDecision]
    channels: list[str]
    failed: list[str] = []
    server: str = ""


class PushFailed(EventBase):
    """A push no channel took: the decisions it was to carry, each channel's failure (its
    kind and why), and the server its links would have pointed at. It is tried again."""

    kind: Literal["push_failed"] = "push_failed"
    decisions: list[PushedDecision]
    failed: list[str]
    server: str = ""


# What a push did, as it is recorded.
Push = DecisionsPushed | PushFailed
