"""Proving a run's log (`loopdeck verify`): its events walked in order of number, each row's
hash made again from the hash before it (`store/chain.py`), and the first event found edited,
removed or out of order named with its run and number.

- edited: the row's hash is not the hash of its body and origin after the event before it,
  its hash was taken away, or a column (kind, time) no longer says what its body says;
- removed: a number missing (a gap, the run's first events, or its last ones: the run's row
  says how far its events go);
- reordered: the row at a number holds another event (its body names another number or run).

Events from before the chain (a store migrated to schema 5: no hash) are counted and said,
never passed as verified; they may only come first in their run, from before `chain_since`
(a store opened by this loopdeck always has it: with it gone, an event without a hash is a
break). The run's row must say what its log says: its state and stop reason its last stop's
(`row_mismatch`); a fork's source, where the store has it, must still hold the events the
fork was rebuilt from, through the hash its `run_forked` recorded (`store/chain.py`).
An export carries the chain: each line is the event's body with its hash (and its row's
origin) added as the last fields, so a file can be verified as the store is
(`store/export_file.py`).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncGenerator
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

from loopdeck.store import chain
from loopdeck.store.base import CHAIN_SINCE, Store
from loopdeck.store.chain import GENESIS, link, stored_time

EDITED, REMOVED, REORDERED = "edited", "removed", "reordered"
PAGE = 2000


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
    whole: bool = False  # an export that says how far it goes, and holds all of it
    # Said in words only: its last stop (seq, state, stop reason), its `run_forked` (seq,
    # source, through_seq, the source's hash there) and what was checked of its source.
    stop: tuple[int, Any, Any] | None = field(default=None, repr=False)
    forked: tuple[int, str, int, str | None] | None = field(default=None, repr=False)
    lineage: str | None = None

    @property
    def verified(self) -> int:
        return self.events - self.unchained

    def as_json(self) -> dict[str, Any]:
        found = asdict(self)
        for said in ("stopped", "whole", "stop", "forked", "lineage"):
            del found[said]  # said in words only: the JSON stays as it was
        # An event no hash vouches for is never counted as intact (`unchained` says how many).
        found["intact"] = self.broken is None and not self.unchained
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
        self, run_id: str, chain_since: datetime | None = None, numbers: set[int] | None = None,
        *, since_gone: bool = False,
    ) -> None:  # fmt: skip
        self.proof = RunProof(run_id)
        self.chain_since = chain_since
        self.since_gone = since_gone  # a store whose `chain_since` was taken away
        self.numbers = numbers or set()
        self.next = 1
        self.prev = GENESIS
        self.chained = False

    def row(self, row: StoredRow) -> bool:
        """Checks one row; False once the run is found broken (the rest is not read)."""
        if self.proof.broken is not None:
            return False
        place = chain.place(row.body)
        broken = self._elsewhere(row, place) or self._gap(row) or self._link(row, place)
        if broken is not None:
            self.proof.broken = broken
            return False
        self.proof.events += 1
        if row.kind in ("run_stopped", "run_forked"):
            self._said(row)
        self.next = row.seq + 1
        return True

    def _said(self, row: StoredRow) -> None:
        """What a stop or a fork's start says, kept to check the run's row and source."""
        event = json.loads(row.body)
        if row.kind == "run_stopped":
            self.proof.stopped = True
            self.proof.stop = (row.seq, event.get("state"), event.get("stop_reason"))
        elif self.proof.forked is None:
            source, through = event.get("source"), event.get("through_seq")
            if isinstance(source, str) and type(through) is int:
                self.proof.forked = (row.seq, source, through, event.get("source_hash"))

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
        if self.since_gone:
            return Break(
                row.seq, EDITED,
                "it has no hash, and the store no longer says when its chain began (its meta"
                " `chain_since`, which every store since schema 5 has, is gone): nothing shows"
                " it is from before the chain",
            )  # fmt: skip
        at = stored_time(place[3] if place is not None else row.at)
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


async def chain_since(store: Store) -> datetime | None:
    rows = await store.fetchall("SELECT value FROM meta WHERE key = ?", (CHAIN_SINCE,))
    return stored_time(rows[0][0]) if rows else None


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


async def checked_rows(
    store: Store, run_id: str, since: datetime | None, *, through: int | None = None
) -> ChainCheck:
    """The run's rows fed to a check, in order of number (through `through`, when given),
    the store's `chain_since` gone when `since` is None."""
    check = ChainCheck(run_id, since, since_gone=since is None)
    async with contextlib.aclosing(stored_rows(store, run_id)) as rows:
        async for row in rows:
            if (through is not None and row.seq > through) or not check.row(row):
                break
    return check


async def verify_run(store: Store, run_id: str, since: datetime | None = None) -> RunProof:
    """One run's log, from its first event to the last its row names. The row's last number
    is read first: events committed while the rows are read are past it, never a gap."""
    since = since if since is not None else await chain_since(store)
    named = await store.fetchall("SELECT last_seq FROM runs WHERE run_id = ?", (run_id,))
    check = await checked_rows(store, run_id, since)
    proof = check.end(int(named[0][0] or 0) if named else None)
    if proof.broken is None:
        proof.broken = await row_mismatch(store, proof, check.next - 1)
    if proof.broken is None:
        proof.broken = await source_mismatch(store, proof, since)
    return proof


async def verify_store(store: Store) -> list[RunProof]:
    """Every run's log: the runs the runs table names and those only the events name."""
    since = await chain_since(store)
    named = await store.fetchall("SELECT run_id FROM runs")
    logged = await store.fetchall("SELECT DISTINCT run_id FROM events")
    runs = sorted({str(row[0]) for row in (*named, *logged)})
    return [await verify_run(store, run_id, since) for run_id in runs]


# -- beside the chain: what a run's row and a fork's source must say ----------------------
async def source_head(
    store: Store, run_id: str, through: int, since: datetime | None
) -> tuple[str | None, str | None]:
    """The hash of the run's event `through`, its log verified up to it (`fork`: what a fork
    is rebuilt from), and None; or None and why it cannot be had (its log broken there, the
    event missing or from before the chain)."""
    check = await checked_rows(store, run_id, since, through=through)
    found = check.proof.broken
    if found is not None:
        return None, f"run {run_id}'s log is broken: event {found.seq} {found.what}: {found.detail}"
    if check.next <= through:
        return None, f"run {run_id} has no event {through}"
    if check.proof.head is None or check.proof.unchained >= through:
        return None, f"run {run_id}'s event {through} is from before the chain: not verified"
    return check.proof.head, None


async def source_mismatch(store: Store, proof: RunProof, since: datetime | None) -> Break | None:
    """A fork whose source, in this store, no longer holds the events it was rebuilt from:
    its log broken through the fork point, or its event there hashed otherwise than the
    fork's `run_forked` recorded. What was checked is said (`proof.lineage`)."""
    if proof.forked is None:
        return None
    seq, source, through, recorded = proof.forked
    if recorded is None:
        proof.lineage = f"a fork of {source}, with no hash of it recorded: not checked against it"
        return None
    if not await store.fetchall("SELECT 1 FROM events WHERE run_id = ? LIMIT 1", (source,)):
        proof.lineage = f"a fork of {source}, which is not in this store: not checked against it"
        return None
    head, why = await source_head(store, source, through, since)
    if why is None and head != recorded:
        why = f"its event {through} is hashed {head}, not {recorded} as when it was forked"
    if why is not None:
        said = f"it is a fork of {source} through its event {through}, and that run no longer"
        return Break(seq, EDITED, f"{said} holds the events it was rebuilt from: {why}")
    proof.lineage = f"a fork of {source}: its source's events through {through} checked"
    return None


async def row_mismatch(store: Store, proof: RunProof, last_read: int) -> Break | None:
    """The run's row saying another state or stop than its log's last stop (or a stop its log
    has none of). Its row read again after its events: compared only when it names the last
    event read (nothing committed between the two reads)."""
    rows = await store.fetchall(
        "SELECT state, stop_reason, last_seq FROM runs WHERE run_id = ?", (proof.run_id,)
    )
    if not rows or int(rows[0][2] or 0) != last_read:
        return None
    state, reason = rows[0][0], rows[0][1]
    if proof.stop is None:
        if reason is None:
            return None
        return Break(last_read + 1, REMOVED, f"the run's row says it stopped (state {state!r},"
                     f" stop reason {reason!r}), but its log has no stop")  # fmt: skip
    seq, said_state, said_reason = proof.stop
    if (state, reason) == (said_state, said_reason):
        return None
    row = f"the run's row says state {state!r}, stop reason {reason!r}"
    stop = f"its stop says {said_state!r}, {said_reason!r}"
    return Break(seq, EDITED, f"{row}; {stop}: the row was changed")
