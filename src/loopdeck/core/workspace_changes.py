"""What changed in a workspace between two of its snapshots (`{"files": {path: hash}}`), and
which of it no approved call explains: the evidence of an `unrequested_change`.

A call the operator (or the run's approver) permitted explains the paths it named until the
first look after its end; a permitted call that names no path (a shell command) explains every
change while it is under way, each such change listed (`Changes.commanded`, said as a finding:
never silent), and the other permits' approved content is still checked meanwhile. Anything
else that changed is unrequested.

A permission covers what the operator was shown, not whatever lands in the file it names: when
the permit says each file's approved content (`permit(expected=...)`, an ACP agent's call, its
diffs or input applied: `acp_env/permitted_writes.py`), the look that spends it compares each
file it changed with that content, and a file holding anything else is unrequested
(`Changes.differs`: its content differs from what was approved), whether the agent wrote it
through loopdeck or to the disk itself (Codex, opencode). A file loopdeck wrote for the call
after asking (`wrote`) is held to what was written. Where the approved content cannot be told
(the permission showed no content for the file, its diff did not apply, or two permitted calls
changed the file at once), the file's change is explained as before, unchecked, and said so
(`Changes.unchecked`, a finding): nothing pretends it was checked. A permit given no `expected`
(the gateway's) explains its paths whatever they hold.
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
    # Of those, the files a permitted call changed to other than the content it was approved
    # with; and, not unrequested, those changed where that content cannot be told, each
    # "path (call)".
    differs: list[str] = field(default_factory=list)
    unchecked: list[str] = field(default_factory=list)
    # Not unrequested either: what changed while a permitted call naming no file (a
    # command) was under way, each path; and those calls. Said as a finding, never silent.
    commanded: list[str] = field(default_factory=list)
    commands: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.added or self.changed or self.removed)

    def said(self) -> str:
        parts = []
        for word, paths in (("added", self.added), ("changed", self.changed),
                            ("removed", self.removed)):  # fmt: skip
            if paths:
                more = f" and {len(paths) - SHOWN} more" if len(paths) > SHOWN else ""
                parts.append(f"{word} {', '.join(paths[:SHOWN])}{more}")
        if self.differs:
            more = f" and {len(self.differs) - SHOWN} more" if len(self.differs) > SHOWN else ""
            parts.append(
                f"{', '.join(self.differs[:SHOWN])}{more}: its content differs from what was"
                " approved"
            )
        return "; ".join(parts)

    def without(self, explained: set[str]) -> Changes:
        """Less the paths explained; an empty folder's entry ("sub/") is explained by any
        explained path inside it (a file removed from it, or written into it)."""

        def kept(paths: list[str]) -> list[str]:
            return [path for path in paths if not _explained(path, explained)]

        return Changes(kept(self.added), kept(self.changed), kept(self.removed))


def _explained(path: str, explained: set[str]) -> bool:
    if path in explained:
        return True
    return path.endswith("/") and any(other.startswith(path) for other in explained)


def content_of(value: str | None) -> str | None:
    """A state entry's content hash, without its mode bits (`workdir/tree.py`)."""
    return None if value is None else value.split(" mode ", 1)[0]


def mode_of(value: str | None) -> str:
    """A state entry's mode bits ("" when none is set)."""
    return "" if value is None or " mode " not in value else value.split(" mode ", 1)[1]


def commanded_words(after: str, changes: Changes) -> str:
    """The finding for what changed while a permitted command ran: the paths, the calls."""
    paths = changes.commanded
    more = f" and {len(paths) - SHOWN} more" if len(paths) > SHOWN else ""
    return (
        f"changed while {', '.join(changes.commands)} ran (a permitted command, naming no"
        f" file), seen after {after}: {', '.join(paths[:SHOWN])}{more}"
    )


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
    # path -> the hash of the content approved for it ("": the file removed; None: cannot be
    # told); None: not checked. And each such file's hash when the call was permitted.
    expected: dict[str, str | None] | None = None
    base: dict[str, str | None] = field(default_factory=dict)
    also: dict[str, str] = field(default_factory=dict)  # path -> another content shown as it


class ChangeWatch:
    """The workspace as last looked at, and the permitted calls that explain what changes."""

    def __init__(self) -> None:
        self.seen: dict[str, str] | None = None
        self.permits: dict[str, Permit] = {}

    def permit(
        self,
        call_id: str,
        paths: Iterable[str] | None,
        expected: Mapping[str, str | None] | None = None,
        also: Mapping[str, str] | None = None,
    ) -> None:
        """`expected`: each named file's approved content's hash (None: cannot be told), and
        `also` another hash the same edit may leave (an agent's tool's own way of making it:
        its line endings). A file another open permit holds to a content too: neither can be
        told (each applies to what the other leaves)."""
        permit = Permit(call_id, None if paths is None else frozenset(paths))
        if expected is not None:
            permit.expected = dict(expected)
            permit.also = dict(also or {})
            permit.base = {path: (self.seen or {}).get(path) for path in expected}
            for other in self.permits.values():
                if other.ended or other.expected is None:
                    continue
                for path in other.expected.keys() & permit.expected.keys():
                    other.expected[path] = permit.expected[path] = None
        self.permits[call_id] = permit

    def wrote(self, path: str, digest: str | None) -> None:
        """Loopdeck wrote `path` for the agent, as permitted or approved: what it wrote is
        what open permits naming the file hold it to now."""
        for permit in self.permits.values():
            if not permit.ended and permit.expected is not None and path in permit.expected:
                permit.expected[path] = digest
                permit.also.pop(path, None)

    def ended(self, call_id: str) -> None:
        if (permit := self.permits.get(call_id)) is not None:
            permit.ended = True

    def turn_ended(self) -> None:
        """A turn's end ends its permits: the next look is the last they explain."""
        for permit in self.permits.values():
            permit.ended = True

    def look(self, snapshot: Mapping[str, Any]) -> Changes:
        """What changed since the last look that no permit explains, and the files the
        permits this look spends (those of calls that ended) hold other than approved."""
        now = files_of(snapshot)
        before, self.seen = self.seen, now
        if before is None:
            return Changes()
        changes = changes_between(before, now)
        permits = list(self.permits.values())
        self.permits = {p.call_id: p for p in permits if not p.ended}
        explained: set[str] = set()
        for permit in permits:
            explained |= permit.paths or frozenset()
        left = changes.without(explained)
        commands = [p.call_id for p in permits if p.paths is None]
        commanded = sorted({*left.added, *left.changed, *left.removed}) if commands else []
        if commands:
            left = Changes()  # explained by the command, and listed
        differs: dict[str, str | None] = {}  # path -> its hash when permitted
        unchecked: list[str] = []
        for permit in (p for p in permits if p.ended and p.expected is not None):
            for path, want in (permit.expected or {}).items():
                have, base = now.get(path), permit.base.get(path)
                if have == base:
                    continue  # the call left it as it was
                if want is None:
                    unchecked.append(f"{path} ({permit.call_id})")
                elif content_of(have) not in {want or None, permit.also.get(path, want) or None}:
                    differs.setdefault(path, base)  # other content than shown
                elif mode_of(have) != mode_of(base):
                    differs.setdefault(path, base)  # its mode changed
        return Changes(
            added=sorted({*left.added, *(p for p, base in differs.items() if base is None)}),
            changed=sorted({*left.changed, *(p for p, b in differs.items() if b and p in now)}),
            removed=sorted({*left.removed, *(p for p in differs if p not in now)}),
            differs=sorted(differs),
            unchecked=unchecked,
            commanded=commanded,
            commands=commands if commanded else [],
        )

    def drop_open(self) -> list[str]:
        """The agent exited with calls whose end never came (it sent no result): a command's
        permit (naming no file) is withdrawn, what changes from here is its no more (their
        calls returned); a permit naming files is ended, explaining what its files hold at
        the next look (an agent such as `claude -p --max-turns` runs its last tool and exits
        with no further model call)."""
        dropped = [p.call_id for p in self.permits.values() if not p.ended and p.paths is None]
        for call_id in dropped:
            del self.permits[call_id]
        self.turn_ended()
        return dropped
