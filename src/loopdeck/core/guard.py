"""The no-progress guard: the same call from the same state cannot produce a new outcome."""

from __future__ import annotations

from typing import Any, NamedTuple

from loopdeck.core.canonical import canonical_json, short_hash


class GuardKey(NamedTuple):
    tool: str
    args_json: str
    state_hash: str

    @property
    def fingerprint(self) -> str:
        return short_hash(list(self))


def guard_key(tool: str, args: dict[str, Any], state_hash: str) -> GuardKey:
    return GuardKey(tool, canonical_json(args), state_hash)


class NoProgressGuard:
    """Remembers every key seen in a run; a second sighting is a repeat."""

    def __init__(self) -> None:
        self._seen: set[GuardKey] = set()
        self.trips = 0

    def admit(self, key: GuardKey, exempt: bool = False) -> bool:
        """True if the call may run. Exempt (polling) tools always may."""
        if exempt:
            return True
        if key in self._seen:
            self.trips += 1
            return False
        self._seen.add(key)
        return True

    def forget(self, key: GuardKey) -> None:
        """The call never took effect (the operator's word on an unknown outcome): the same
        call from the same state is no repeat."""
        self._seen.discard(key)
