"""The events of what a run noticed that its operator must see, beside its review's verdicts
(`ReviewVerdict`): a change of the workspace no approved call explains (`UnrequestedChange`),
and a finding a kind's own loop makes (`Finding`). Events, so that each is in the store as it
is made: shown live, replayed after the runner is gone, exported and chained with the rest."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from loopdeck.core.event_base import EventBase


class UnrequestedChange(EventBase):
    """The workspace changed and no approved call explains it (an agent writing on its own,
    before its permission was answered, or after a rejection): the paths, and the call or
    turn it was seen after. A guarded run (`--approve deny|wait`, an operator attached)
    stops `policy_block` on it."""

    kind: Literal["unrequested_change"] = "unrequested_change"
    after: str  # "c3 edit: calc.py" or "turn 2": what the change was seen after
    added: list[str] = []
    changed: list[str] = []
    removed: list[str] = []
    stops: bool = False  # the run stops on it (`policy_block`)


class RiskRaised(BaseModel):
    """A tool of the run made a write from here on by what the env's outside said (a server
    that marked it less safe mid-run), and why: the fact itself, carried with its finding, so
    that a run rebuilt from its log makes it a write again at that place, whatever the outside
    says then (`Environment.risk_raised_again`)."""

    model_config = ConfigDict(frozen=True)
    tool: str
    why: str


class Finding(EventBase):
    """Something a kind's own loop noticed in `round` (`RunHost.finding`): a file changed that
    no permission showed the content of, a change while a permitted command ran, what the goal
    check itself wrote, an upstream's failed call, the operator's word on an unchecked goal.
    The run's outcome lists it too, as `listed` says it."""

    kind: Literal["finding"] = "finding"
    round: int
    text: str
    raised: RiskRaised | None = None  # the tool this finding says was made a write


def listed(round_no: int, text: str) -> str:
    """A finding as the run's outcome lists it (`RunOutcome.findings`), a review's reasons
    alike: "round 2: …"."""
    return f"round {round_no}: {text}"
