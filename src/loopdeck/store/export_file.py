"""A run's log as `loopdeck export` writes it, and an export file proven as the store is
(`loopdeck verify --export FILE`). Each line is an event's body with its hash (and its row's
origin) as its last fields (`store/chain.py`); a run's first line with a hash also says how
far the run's events in the export go (`export_through`: its last event when the export
began, read before its rows, so events committed meanwhile are left to a later export).

A file is checked run by run as the store is (`verification.ChainCheck`), with no run's row
to say how far its events go: the export's own word does. A file cut short (its last lines
gone, or cut inside its last line: a line with no end that is no event) is broken where it
was cut, "cut short after event N". An export from before exports said how far they go
(or a file stripped of that) is intact as far as it goes, its stop said not to be among its
events; its last hash, kept elsewhere, tells the rest.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from loopdeck.store import chain
from loopdeck.store.base import Store, StoreError
from loopdeck.store.chain import exported, from_export, holds_hash
from loopdeck.store.verification import (
    REMOVED,
    Break,
    ChainCheck,
    RunProof,
    StoredRow,
    stored_rows,
)

RUN_NAMED = re.compile(r'\{"run_id":("(?:[^"\\]|\\.)*")')  # how an event's body begins


@dataclass
class ExportFile:
    """An export's lines as the rows they were, by run; how far each run's export said it
    goes; and where the file ends inside a line, if it does (the run, the line's number)."""

    runs: dict[str, list[StoredRow]] = field(default_factory=dict)
    through: dict[str, int] = field(default_factory=dict)
    cut: tuple[str, int] | None = None


async def exported_lines(store: Store, run_id: str) -> AsyncIterator[str]:
    """The run's events as `loopdeck export` writes them, in order, through its last event
    when it began; its first line with a hash says how far that is."""
    rows = await store.fetchall("SELECT MAX(seq) FROM events WHERE run_id = ?", (run_id,))
    last = int(rows[0][0] or 0)
    said = False
    async with contextlib.aclosing(stored_rows(store, run_id)) as stored:
        async for row in stored:
            if row.seq > last:
                return
            through = None if said or row.hash is None else last
            said = said or through is not None
            yield exported(row.body, row.origin, row.hash, through)


def read_export(lines: Iterable[str]) -> ExportFile:
    """An export's lines as the rows they were (`ValueError` naming a line that is none),
    a last line cut inside an event kept apart."""
    found = ExportFile()
    last_run = None
    for number, line in enumerate(lines, 1):
        text = line.rstrip("\r\n")
        if not text.strip():
            continue
        try:
            run_id, row, through = _row(number, text)
        except ValueError:
            run = _run_named(text) or last_run
            if line.endswith("\n") or run is None:  # a whole line that is no event
                raise
            found.cut = (run, number)  # the file ends inside this line: cut there
            break
        found.runs.setdefault(run_id, []).append(row)
        if through is not None:
            found.through.setdefault(run_id, through)
        last_run = run_id
    return found


def _row(number: int, text: str) -> tuple[str, StoredRow, int | None]:
    body, origin, digest, through = from_export(text)
    if digest is None and holds_hash(text):
        raise ValueError(
            f"line {number} has a hash, but not as `loopdeck export` wrote it (saved again"
            " by another tool, or edited): its events cannot be verified"
        )
    place = chain.place(body)
    if place is None or not isinstance(place[0], str) or type(place[1]) is not int:
        raise ValueError(f"line {number} is not an event of a loopdeck export")
    run_id, seq, kind, at = place
    return run_id, StoredRow(seq, str(kind), str(at), body, origin, digest), through


def _run_named(text: str) -> str | None:
    """The run a line cut short names at its start, if it got that far."""
    named = RUN_NAMED.match(text)
    if named is None:
        return None
    run = json.loads(named.group(1))
    return run if isinstance(run, str) else None


def verify_export(path: Path) -> list[RunProof]:
    """The runs in an export file, each checked as the store is checked, and as far as the
    export says it goes."""
    try:
        with path.open(encoding="utf-8") as file:
            found = read_export(file)
    except OSError as exc:
        raise StoreError(f"{path}: cannot be read: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise StoreError(f"{path}: not a loopdeck export: not UTF-8 text ({exc.reason})") from exc
    except ValueError as exc:
        raise StoreError(f"{path}: {exc}") from exc
    if not found.runs:
        raise StoreError(f"{path}: no events in it")
    proofs = []
    for run_id, rows in found.runs.items():
        check = ChainCheck(run_id, numbers={row.seq for row in rows})
        for row in rows:
            if not check.row(row):
                break
        proof = check.end()
        if proof.broken is None:
            _as_far_as_said(proof, check.next - 1, found)
        proofs.append(proof)
    return proofs


def _as_far_as_said(proof: RunProof, read: int, found: ExportFile) -> None:
    """The run's events as far as its export said they go, and its last line whole; else
    broken where the file was cut."""
    through = found.through.get(proof.run_id)
    said = []
    if found.cut is not None and found.cut[0] == proof.run_id:
        said.append(f"its line {found.cut[1]} ends inside an event")
    if through is not None and read < through:
        said.append(f"its export holds the run's events to {through}")
    if said:
        proof.broken = Break(
            read + 1, REMOVED, f"the file was cut short after event {read} ({'; '.join(said)})"
        )
    elif through is not None and read >= through:
        proof.whole = True
