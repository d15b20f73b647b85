"""Each run's events as a hash chain: every row of the `events` table carries `hash`, the
sha256 of the hash of the run's previous event, the row's origin and its body. The body is
the event as stored and names its run, number, kind and time; the row's own columns must say
the same (`store/verification.py` checks both). A run's first event follows `GENESIS`, and
so does the first event written after rows from before the chain (schema < 5, no hash).

The runner's writer keeps its run's last hash (`RunChain`): each event is linked as it is
published, in the same pass that serializes it, and a batch's links are checked against the
last committed hash before the batch is appended, so an append costs one sha256 and no read.
A reader's event (a crash mark, an ended run's resolved outcome) reads the run's last row in
its transaction (`reader_row`). Every writer of a run's events takes the run's turn first
(`Store.transaction(run_id)`), so the chain follows the events' numbers.

An export carries the chain (`exported`): each line is the event's body with its hash (and
its row's origin) added as the last fields, taken off again to verify a file (`from_export`);
a run's first line with a hash also says how far the run's events in the export go
(`export_through`), so a file cut short can say where.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from hashlib import sha256
from typing import TYPE_CHECKING, Any, TypeVar

from loopdeck.store.base import Tx

if TYPE_CHECKING:  # the runtime's events (pydantic): the caller's class is given
    from loopdeck.core.events import EventBase

GENESIS = "0" * 64
# What an export adds to a body: its hash, its row's origin, and (on a run's first line with
# a hash) how far the run's events it holds go.
CHAIN_FIELDS = frozenset({"hash", "origin", "export_through"})
EventRow = tuple[str, int, str, str, str]  # run_id, seq, kind, at, body
ChainedRow = tuple[str, int, str, str, str, str | None]  # and its hash
EVENT_COLUMNS = ("run_id", "seq", "kind", "at", "body")
CHAINED_COLUMNS = (*EVENT_COLUMNS, "hash")
# A queued event (whatever the writer queues it as), the hash it follows, and its row with its
# own hash (None: linked when committed).
LinkedRow = tuple[object, str, ChainedRow]
E = TypeVar("E", bound="EventBase")


def link(prev: str, body: str, origin: str | None = None) -> str:
    """The hash of an event whose row has `body` and `origin`, after an event hashed `prev`.
    What is hashed is one text, read back unambiguously: the 64 hex digits of `prev`, then
    `-` (no origin) or the origin's length, `:` and the origin, then the body."""
    mark = "-" if origin is None else f"{len(origin)}:{origin}"
    text = f"{prev}{mark}{body}"
    try:
        data = text.encode()
    except UnicodeEncodeError:  # a lone surrogate in an edited row: hashed, never fatal
        data = text.encode("utf-8", "surrogatepass")
    return sha256(data).hexdigest()


def body_at(body: str) -> str | None:
    """An event's time as its row's `at` has it, read off the body it was serialized to (its
    third field, after run_id and seq: `,"at":"` cannot occur inside a JSON string), in
    `datetime.isoformat()`'s form; None when the body has none in that place."""
    start = body.find(',"at":"') + 7
    end = body.find('"', start)
    if start < 7 or end < 0:
        return None
    if body[end - 1] == "Z":
        return body[start : end - 1] + "+00:00"
    return body[start:end]


async def chain_head(tx: Tx, run_id: str, before: int | None = None) -> tuple[int, str]:
    """The number and hash of the run's last stored event (before `before`): 0 and GENESIS
    when there is none, GENESIS when it has no hash (it is from before the chain)."""
    sql = "SELECT seq, hash FROM events WHERE run_id = ?"
    params: tuple[Any, ...] = (run_id,)
    if before is not None:
        sql += " AND seq < ?"
        params = (run_id, before)
    rows = await tx.fetchall(sql + " ORDER BY seq DESC LIMIT 1", params)
    if not rows:
        return 0, GENESIS
    return int(rows[0][0]), rows[0][1] or GENESIS


async def reader_row(
    tx: Tx, make: type[E], run_id: str, **fields: Any
) -> tuple[E, tuple[Any, ...]]:
    """A reader's event for `run_id`, numbered after the run's last stored event, and its row
    for `READER_INSERT` (run_id, seq, kind, at, body, 'reader', hash) chained to it."""
    seq, prev = await chain_head(tx, run_id)
    event = make(run_id=run_id, seq=seq + 1, **fields)
    body = event.as_json()
    at = body_at(body) or event.at.isoformat()
    kind = str(getattr(event, "kind", ""))
    return event, (run_id, event.seq, kind, at, body, "reader", link(prev, body, "reader"))


READER_INSERT = (
    "INSERT INTO events (run_id, seq, kind, at, body, origin, hash) VALUES (?, ?, ?, ?, ?, ?, ?)"
)


class RunChain:
    """A writer's end of its run's chain: the last event linked as it was queued (its number
    and hash: the tail) and the last committed (`head`: (seq, hash)). A fresh run's first
    event (number 1) follows GENESIS; a writer that starts further on (bringing back a spill)
    learns its head from the store at its first commit."""

    def __init__(self) -> None:
        self.tail_seq = 0  # 0: no tail (a run's first event follows GENESIS)
        self.tail_hash = GENESIS
        self.head: tuple[int, str] | None = None

    def queued(self, seq: int, row: EventRow) -> ChainedRow:
        """An event's row as it is queued, with its hash when the tail is the event before it
        (after `tail_hash`, read before this call): one sha256 while the last batch is being
        inserted; with None, linked at the commit."""
        if seq != self.tail_seq + 1:
            self.tail_seq = -1  # unknown: the next ones are linked at the commit
            return (*row, None)
        try:  # `link` written out: this is the writer's path, once per event
            digest = sha256(f"{self.tail_hash}-{row[4]}".encode()).hexdigest()
        except UnicodeEncodeError:
            digest = link(self.tail_hash, row[4])
        self.tail_seq, self.tail_hash = seq, digest
        return (*row, digest)

    def broken(self) -> None:
        """An event could not be queued with its row: the next ones are linked at the commit."""
        self.tail_seq = -1

    async def rows(
        self, tx: Tx, run_id: str, first: int, rows: Sequence[LinkedRow]
    ) -> list[ChainedRow]:
        """A batch's rows with their hashes: each row linked as it was queued kept when it
        follows the hash before it, linked again when it does not (the head read from the
        store when this writer does not know it)."""
        head = self.head
        if head is not None and head[0] == first - 1:
            prev = head[1]
        elif first == 1:  # a run's first event
            prev = GENESIS
        else:
            prev = (await chain_head(tx, run_id, first))[1]
        linked = [row for _, _, row in rows]
        # As queued, each row follows the one before it (the usual batch): kept whole.
        hashes = [row[5] for row in linked]
        followed = rows and rows[0][1] == prev and None not in hashes
        if followed and [after for _, after, _ in rows[1:]] == hashes[:-1]:
            return linked
        chained: list[ChainedRow] = []
        add = chained.append
        for _, after, row in rows:
            if row[5] is not None and after == prev:
                prev = row[5]
                add(row)
            else:
                prev = link(prev, row[4])
                add((*row[:5], prev))
        return chained

    def committed(self, last: ChainedRow | None, more_queued: bool) -> None:
        """After a commit: its last row is the head (None: unknown, read again next time);
        with nothing queued since, the next event is linked as it is queued from there."""
        self.head = None if last is None or last[5] is None else (last[1], last[5])
        if not more_queued and self.head is not None:
            self.tail_seq, self.tail_hash = self.head


def exported(body: str, origin: str | None, digest: str | None, through: int | None = None) -> str:
    """An event's line in an export: its body, with its hash (and its row's origin, and
    `through`: the number of the run's last event the export holds) added as its last fields;
    a body from before the chain as it is."""
    if digest is None or not body.endswith("}"):
        return body
    origin_field = "" if origin is None else f',"origin":{json.dumps(origin)}'
    through_field = "" if through is None else f',"export_through":{int(through)}'
    return f'{body[:-1]},"hash":{json.dumps(digest)}{origin_field}{through_field}}}'


def from_export(line: str) -> tuple[str, str | None, str | None, int | None]:
    """(body, origin, hash, how far the export goes) of an export's line: the fields
    `exported` added, taken off."""
    cut = line.rfind(',"hash":"')
    if cut < 0:
        return line, None, None, None
    try:
        added = json.loads("{" + line[cut + 1 :])
    except ValueError:
        return line, None, None, None
    if not isinstance(added, dict) or not set(added) <= CHAIN_FIELDS:
        return line, None, None, None
    origin, digest, through = added.get("origin"), added["hash"], added.get("export_through")
    if not isinstance(digest, str) or not isinstance(origin, str | None):
        return line, None, None, None
    if through is not None and (type(through) is not int or through < 1):
        return line, None, None, None
    return line[:cut] + "}", origin, digest, through


def holds_hash(text: str) -> bool:
    """A line whose JSON has the `hash` field `exported` adds, however it is spaced."""
    try:
        event = json.loads(text)
    except ValueError:
        return False
    return isinstance(event, dict) and "hash" in event


def place(body: str) -> tuple[Any, ...] | None:
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


def stored_time(text: Any) -> datetime | None:
    """A stored time, with its zone (one without is no time loopdeck wrote)."""
    try:
        at = datetime.fromisoformat(str(text))
    except ValueError:
        return None
    return at if at.tzinfo is not None else None
