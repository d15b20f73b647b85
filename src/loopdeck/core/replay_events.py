"""The events that make a run's log enough to rebuild the run from (`core/replay_log.py`): the
model's whole replies and the env's state as the run saw it, recorded as they come
(`core/recorded_inputs.py`); and the moves of a run between workers and into a fork."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from loopdeck.core.event_base import EventBase


class ModelReplied(EventBase):
    """A model's whole reply, recorded just before its `ModelCalled`: its text uncapped, its
    tool calls with their ids and raw arguments, its usage. What the call was asked with: how
    many messages, the sha256 of the last of them (`TAIL`), and the last event before the call
    began (`asked_after`: what was recorded after it arrived while the model was thinking)."""

    kind: Literal["model_replied"] = "model_replied"
    role: str
    round: int
    asked_after: int
    messages: int
    tail_sha256: str
    reply: dict[str, Any]


class StateSeen(EventBase):
    """The env's state as the run saw it, each time it differed from the last look: its
    fingerprint and snapshot (None: an env's own fingerprint, seen without a snapshot). A run
    rebuilt from its log is served these instead of reading its env."""

    kind: Literal["state_seen"] = "state_seen"
    fingerprint: str
    snapshot: dict[str, Any] | None = None


class RunMoved(EventBase):
    """The run goes on in another worker (`loopdeck worker`): where, from where, under which
    lease epoch, in words (`resumed on host-b after host-a's lease expired 12s ago`), and the
    last event it was rebuilt from."""

    kind: Literal["run_moved"] = "run_moved"
    host: str
    was: str | None
    epoch: int
    note: str
    after_seq: int


class RunForked(EventBase):
    """The run is a fork (`loopdeck fork`): the run it came from, the call it was forked at,
    that run's events it was rebuilt from (through `through_seq`, its model's replies served
    again), what was changed, and whether its env is in the state the run saw there.
    `source_hash`: the hash of the source's event `through_seq` when it was forked (its log
    verified up to it): `verify` checks the source still holds those events.
    `rules_since`: when its source's rules came into force, the fork's rules' ages counting
    from it (`policy/gate.py`) where no `PolicyInForce` of its own says so (None in older
    logs, and a source without a policy)."""

    kind: Literal["run_forked"] = "run_forked"
    source: str
    at_call: str
    through_seq: int
    changed: list[str] = []
    state_restored: bool = False
    source_hash: str | None = None
    # The source's writes whose outcome was unknown, the fork's env restored to the state seen
    # after them: their outcome in the fork is that state's, not the operator's to say.
    settled: list[str] = []
    rules_since: datetime | None = None
