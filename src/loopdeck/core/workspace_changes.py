"""What changed in a workspace between two of its snapshots (`{"files": {path: hash}}`), and
which of it no approved call explains: the evidence of an `unrequested_change`.

A call the operator (or the run's approver) permitted explains the paths it named until the
first look after its end; a permitted call that names no path (a shell command) explains every
change while it is under way. Anything else that changed is unrequested.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

SHOWN = 5  # paths said in a stop's detail; the event keeps them all


@dataclass(frozen=True)
class Changes:
    added: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.added or self.changed or self.removed)

    def said(self) -> str:
        parts = []
        for word, paths in (("added", self.added), ("changed", self.changed),
                            ("removed", self.removed)):  # fmt: skip
            if paths:
                more = f" and {len(paths) - SHOWN} more" if len(paths) > SHOWN else ""
                parts.append(f"{word} {', '.join(paths[:SHOWN])}{more}")
        return "; ".join(parts)

    def without(self, explained: set[str]) -> Changes:
        def kept(paths: list[str]) -> list[str]:
            return [path for path in paths if path not in explained]

        return Changes(kept(self.added), kept(self.changed), kept(self.removed))


def files_of(snapshot: Mapping[str, Any]) -> dict[str, str]:
    files = snapshot.get("files")
    return dict(files) if isinstance(files, Mapping) else {}


def changes_between(before: Mapping[str, str], after: Mapping[str, str]) -> Changes:
    return Changes(
        added=sorted(after.keys() - before.keys()),
        changed=sorted(p for p in after.keys() & before.keys() if after[p] != before[p]),
        removed=sorted(before.keys() - after.keys()),
    )


@dataclass
class Permit:
    """A permitted call's reach: the paths it named, or every path (`None`)."""

    call_id: str
    paths: frozenset[str] | None
    ended: bool = False


class ChangeWatch:
    """The workspace as last looked at, and the permitted calls that explain what changes."""

    def __init__(self) -> None:
        self.seen: dict[str, str] | None = None
        self.permits: dict[str, Permit] = {}

    def permit(self, call_id: str, paths: Iterable[str] | None) -> None:
        self.permits[call_id] = Permit(call_id, None if paths is None else frozenset(paths))

    def ended(self, call_id: str) -> None:
        if (permit := self.permits.get(call_id)) is not None:
            permit.ended = True

    def turn_ended(self) -> None:
        """A turn's end ends its permits: the next look is the last they explain."""
        for permit in self.permits.values():
            permit.ended = True

    def look(self, snapshot: Mapping[str, Any]) -> Changes:
        """What changed since the last look that no permit explains; the permits of calls
        that ended are spent by it."""
        now = files_of(snapshot)
        before, self.seen = self.seen, now
        if before is None:
            return Changes()
        changes = changes_between(before, now)
        permits = list(self.permits.values())
        self.permits = {p.call_id: p for p in permits if not p.ended}
        if not changes or any(p.paths is None for p in permits):
            return Changes()
        explained: set[str] = set()
        for permit in permits:
            explained |= permit.paths or frozenset()
        return changes.without(explained)
