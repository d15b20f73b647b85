"""Proving a run's log (`loopdeck verify`): its events walked in order of number, each row's
hash made again from the hash before it (`store/chain.py`), and the first event found edited,
removed or out of order named with its run and number.

- edited: the row's hash is not the hash of its body and origin after the event before it,
  its hash was taken away, or a column (kind, time) no longer says what its body says;
- removed: a number missing (a gap, the run's first events, or its last ones: the run's row
  says how far its events go);
- reordered: the row at a number holds another event (its body names another number or run).

Events from before the chain (a store migrated to schema 5: no hash) are counted and said,
never passed as verified; they may only come first in their run, from before `chain_since`.
An export carries the chain (`exported`): each line is the event's body with its hash (and its
row's origin) added as the last fields, so a file can be verified as the store is.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncGenerator, AsyncIterator, Iterable, Iterator
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from loopdeck.store.base import CHAIN_SINCE, Store, StoreError
from loopdeck.store.chain import GENESIS, body_at, link

EDITED, REMOVED, REORDERED = "edited", "removed", "reordered"
PAGE = 2000
CHAIN_FIELDS = frozenset({"hash", "origin"})  # what an export adds to a body


@dataclass(frozen=True)
class Break:
    """The first thing wrong in a run's log: the event's number, what happened, and why."""

    seq: int
    what: str  # EDITED, REMOVED or REORDERED
    detail: str


@dataclass
class RunProof:
    """What verifying one run found. `unchained`: events from before the chain, at its start
    (not verified); `head`: the last event's hash (to keep elsewhere: a later verify of the
    same events ends at it)."""

    run_id: str
    events: int = 0
    unchained: int = 0
    head: str | None = None
    broken: Break | None = None
    stopped: bool = False  # its stop is among the events read (a resolve may come after it)

    @property
    def verified(self) -> int:
        return self.events - self.unchained

    def as_json(self) -> dict[str, Any]:
        found = asdict(self)
        del found["stopped"]  # said in words only: the JSON stays as it was
        found["intact"] = self.broken is None
        return found


@dataclass(frozen=True)
class StoredRow:
    seq: int
    kind: str
    at: str
    body: str
    origin: str | None
    hash: str | None


class ChainCheck:
    """One run's rows, fed in their order (the store's: by number; a file's: its lines');
    stops listening at the first break. `numbers`: every number the rows fed will have, when
    known beforehand (a file's), to tell a number coming late from one missing."""

    def __init__(
        self, run_id: str, chain_since: datetime | None = None, numbers: set[int] | None = None
    ) -> None:
        self.proof = RunProof(run_id)
        self.chain_since = chain_since
        self.numbers = numbers or set()
        self.next = 1
        self.prev = GENESIS
        self.chained = False

    def row(self, row: StoredRow) -> bool:
        """Checks one row; False once the run is found broken (the rest is not read)."""
        if self.proof.broken is not None:
            return False
        place = _place(row.body)
        broken = self._elsewhere(row, place) or self._gap(row) or self._link(row, place)
        if broken is not None:
            self.proof.broken = broken
            return False
        self.proof.events += 1
        self.proof.stopped = self.proof.stopped or row.kind == "run_stopped"
        self.next = row.seq + 1
        return True

    def end(self, last_seq: int | None = None) -> RunProof:
        """The run's proof; `last_seq`: how far its row says its events go."""
        if self.proof.broken is None and last_seq is not None and last_seq >= self.next:
            gone = _numbers(self.next, last_seq)
            self.proof.broken = Break(
                self.next, REMOVED,
                f"{gone} missing: the run's row says its events go to {last_seq}",
            )  # fmt: skip
        return self.proof

    def _elsewhere(self, row: StoredRow, place: tuple[Any, ...] | None) -> Break | None:
        """A row holding another run's event."""
        if place is None or place[0] == self.proof.run_id:
            return None
        return Break(row.seq, REORDERED, f"the row numbered {row.seq} holds an event of run "
                     f"{place[0]!r}")  # fmt: skip

    def _gap(self, row: StoredRow) -> Break | None:
        if row.seq == self.next:
            return None
        if row.seq < self.next:  # a file's line again, or late
            return Break(row.seq, REORDERED, f"event {row.seq} comes after event {self.next - 1}")
        if self.next in self.numbers:  # a file's line that comes later
            return Break(self.next, REORDERED, f"event {row.seq} comes before event {self.next}")
        return Break(self.next, REMOVED, f"{_numbers(self.next, row.seq - 1)} missing")

    def _link(self, row: StoredRow, place: tuple[Any, ...] | None) -> Break | None:
        if row.hash is None:
            return self._unchained(row, place)
        if link(self.prev, row.body, row.origin) != row.hash:
            return self._mismatch(row, place)
        if place is None or place[1] != row.seq:
            said = "not an event" if place is None else f"event {place[1]}"
            return Break(row.seq, EDITED, f"its hash holds, but its body is {said}")
        if place[2:] != (row.kind, row.at):
            return Break(
                row.seq, EDITED,
                f"its row says kind {row.kind!r} at {row.at}, its event {place[2]!r} at"
                f" {place[3]}",
            )  # fmt: skip
        self.prev, self.chained, self.proof.head = row.hash, True, row.hash
        return None

    def _unchained(self, row: StoredRow, place: tuple[Any, ...] | None) -> Break | None:
        """A row without a hash: from before the chain only at the run's start, and only
        from before the chain began in this store."""
        if self.chained:
            return Break(row.seq, EDITED, "its hash is gone (the events before it have theirs)")
        at = _time(place[3] if place is not None else row.at)
        if self.chain_since is not None and (at is None or at >= self.chain_since):
            return Break(
                row.seq, EDITED,
                f"it has no hash, and it is not from before the chain began"
                f" ({self.chain_since.isoformat()})",
            )  # fmt: skip
        self.proof.unchained += 1
        self.prev = GENESIS  # the first event with a hash follows GENESIS
        return None

    def _mismatch(self, row: StoredRow, place: tuple[Any, ...] | None) -> Break:
        if place is not None and place[1] != row.seq:  # (another run's: `_elsewhere`)
            return Break(row.seq, REORDERED, f"the row numbered {row.seq} holds event {place[1]}")
        if not self.chained and self.proof.unchained:
            return Break(
                row.seq, EDITED,
                "its hash does not follow from the start of the chain: it was changed, or"
                " the events before it lost their hashes",
            )  # fmt: skip
        return Break(row.seq, EDITED, "its content does not match its hash")


def _numbers(first: int, last: int) -> str:
    return f"event {first} is" if first == last else f"events {first} to {last} are"


def _place(body: str) -> tuple[Any, ...] | None:
    """What the body says of itself: (run_id, seq, kind, at as a row has it); None when it is
    not an event's JSON."""
    try:
        event = json.loads(body)
    except ValueError:
        return None
    if not isinstance(event, dict):
        return None
    at = body_at(body)
    if at is None and isinstance(event.get("at"), str):
        at = event["at"][:-1] + "+00:00" if event["at"].endswith("Z") else event["at"]
    return event.get("run_id"), event.get("seq"), event.get("kind"), at


def _time(text: Any) -> datetime | None:
    """A stored time, with its zone (one without is no time loopdeck wrote)."""
    try:
        at = datetime.fromisoformat(str(text))
    except ValueError:
        return None
    return at if at.tzinfo is not None else None


async def chain_since(store: Store) -> datetime | None:
    rows = await store.fetchall("SELECT value FROM meta WHERE key = ?", (CHAIN_SINCE,))
    return _time(rows[0][0]) if rows else None


async def stored_rows(store: Store, run_id: str) -> AsyncGenerator[StoredRow, None]:
    """The run's rows in order of number (whatever their numbers), a page at a time."""
    after: tuple[Any, ...] = ()
    while True:
        page = await store.fetchall(
            "SELECT seq, kind, at, body, origin, hash FROM events WHERE run_id = ?"
            f"{' AND seq > ?' if after else ''} ORDER BY seq LIMIT ?",
            (run_id, *after, PAGE),
        )
        for row in page:
            yield StoredRow(int(row[0]), row[1], row[2], row[3], row[4], row[5])
        if len(page) < PAGE:
            return
        after = (int(page[-1][0]),)


async def verify_run(store: Store, run_id: str, since: datetime | None = None) -> RunProof:
    """One run's log, from its first event to the last its row names."""
    since = since if since is not None else await chain_since(store)
    check = ChainCheck(run_id, since)
    async with contextlib.aclosing(stored_rows(store, run_id)) as rows:
        async for row in rows:
            if not check.row(row):
                break
    named = await store.fetchall("SELECT last_seq FROM runs WHERE run_id = ?", (run_id,))
    return check.end(int(named[0][0] or 0) if named else None)


async def verify_store(store: Store) -> list[RunProof]:
    """Every run's log: the runs the runs table names and those only the events name."""
    since = await chain_since(store)
    named = await store.fetchall("SELECT run_id FROM runs")
    logged = await store.fetchall("SELECT DISTINCT run_id FROM events")
    runs = sorted({str(row[0]) for row in (*named, *logged)})
    return [await verify_run(store, run_id, since) for run_id in runs]


def exported(body: str, origin: str | None, digest: str | None) -> str:
    """An event's line in an export: its body, with its hash (and its row's origin) added as
    its last fields; a body from before the chain as it is."""
    if digest is None or not body.endswith("}"):
        return body
    origin_field = "" if origin is None else f',"origin":{json.dumps(origin)}'
    return f'{body[:-1]},"hash":{json.dumps(digest)}{origin_field}}}'


async def exported_lines(store: Store, run_id: str) -> AsyncIterator[str]:
    """The run's events as `loopdeck export` writes them, in order."""
    async with contextlib.aclosing(stored_rows(store, run_id)) as rows:
        async for row in rows:
            yield exported(row.body, row.origin, row.hash)


def _from_export(line: str) -> tuple[str, str | None, str | None]:
    """(body, origin, hash) of an export's line: the fields `exported` added, taken off."""
    cut = line.rfind(',"hash":"')
    if cut < 0:
        return line, None, None
    try:
        added = json.loads("{" + line[cut + 1 :])
    except ValueError:
        return line, None, None
    if not isinstance(added, dict) or not set(added) <= CHAIN_FIELDS:
        return line, None, None
    origin, digest = added.get("origin"), added["hash"]
    if not isinstance(digest, str) or not isinstance(origin, str | None):
        return line, None, None
    return line[:cut] + "}", origin, digest


def _holds_hash(text: str) -> bool:
    """A line whose JSON has the `hash` field `exported` adds, however it is spaced."""
    try:
        event = json.loads(text)
    except ValueError:
        return False
    return isinstance(event, dict) and "hash" in event


def export_rows(lines: Iterable[str]) -> Iterator[tuple[str, StoredRow]]:
    """An export's lines as the rows they were, with their runs."""
    for number, line in enumerate(lines, 1):
        text = line.rstrip("\r\n")
        if not text.strip():
            continue
        body, origin, digest = _from_export(text)
        if digest is None and _holds_hash(text):
            raise ValueError(
                f"line {number} has a hash, but not as `loopdeck export` wrote it (saved again"
                " by another tool, or edited): its events cannot be verified"
            )
        place = _place(body)
        if place is None or not isinstance(place[0], str) or type(place[1]) is not int:
            raise ValueError(f"line {number} is not an event of a loopdeck export")
        run_id, seq, kind, at = place
        yield run_id, StoredRow(seq, str(kind), str(at), body, origin, digest)


def verify_export(path: Path) -> list[RunProof]:
    """The runs in an export file, each checked as the store is checked (without the run's row:
    an export's last events cut off leave no gap; its last hash, kept elsewhere, tells)."""
    runs: dict[str, list[StoredRow]] = {}
    try:
        with path.open(encoding="utf-8") as file:
            for run_id, row in export_rows(file):
                runs.setdefault(run_id, []).append(row)
    except OSError as exc:
        raise StoreError(f"{path}: cannot be read: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise StoreError(f"{path}: not a loopdeck export: not UTF-8 text ({exc.reason})") from exc
    except ValueError as exc:
        raise StoreError(f"{path}: {exc}") from exc
    if not runs:
        raise StoreError(f"{path}: no events in it")
    proofs = []
    for run_id, rows in runs.items():
        check = ChainCheck(run_id, numbers={row.seq for row in rows})
        for row in rows:
            if not check.row(row):
                break
        proofs.append(check.end())
    return proofs
