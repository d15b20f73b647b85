"""Bringing spilled events back: a runner whose store could not take its last events left
them in a spill file (`store/spill.py`); the next loopdeck process to open that store writes
the ones not yet in it, in order, with the rows they change, and removes the file.

A file still held (flock) belongs to a live writer, which commits its events itself: it is
left alone. A reader's `crashed` mark on the run (its runner had gone before its events were
in) is undone as the live writer undoes it, and the correction is recorded. A worker's spill
(its header names its lease's epoch) is written under that epoch's fence: a run another
worker holds now refuses it, and the file is removed, its events never written."""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path
from typing import Any

from loopdeck.core.events import EVENT_ADAPTER, Event, RunCorrected, StateChanged
from loopdeck.store.base import Store, StoreError
from loopdeck.store.leases import LeaseLost
from loopdeck.store.spill import FORMAT, spills_of
from loopdeck.store.writer import EventWriter


async def bring_back_spills(store: Store) -> list[str]:
    """Every spill file naming this store, written into it; what was done, for people."""
    notes = []
    for path, header in spills_of(store.path):
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            continue  # another process brought it back a moment ago
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                continue  # its writer is alive and commits these itself
            try:
                note = await _write_back(store, path, header)
            except LeaseLost as exc:
                note = f"{path}: dropped, never written: {exc}"
            except StoreError as exc:
                notes.append(f"{path}: not written into the store yet ({exc}); kept for later")
                continue
            except (OSError, ValueError) as exc:
                notes.append(f"{path}: cannot be read back ({exc}); left where it is")
                continue
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
            if note:
                notes.append(note)
        finally:
            os.close(fd)
    return notes


def _spilled_events(path: Path, run_id: str) -> list[Event]:
    events: dict[int, Event] = {}
    with path.open(encoding="utf-8") as file:
        for line in file:
            if not line.strip() or line.startswith('{"format": "' + FORMAT):
                continue
            event = EVENT_ADAPTER.validate_json(line)
            if event.run_id == run_id:
                events.setdefault(event.seq, event)
    return [events[seq] for seq in sorted(events)]


async def _write_back(store: Store, path: Path, header: dict[str, Any]) -> str:
    run_id = str(header["run_id"])
    present = {
        int(row[0])
        for row in await store.fetchall(
            "SELECT seq FROM events WHERE run_id = ? AND origin IS NULL", (run_id,)
        )
    }
    events = [e for e in _spilled_events(path, run_id) if e.seq not in present]
    if not events:
        return ""
    epoch = header.get("epoch")
    writer = EventWriter(
        store,
        approve_mode=str(header.get("approve_mode") or ""),
        fence=None if epoch is None else (run_id, int(epoch)),
    )
    # The rows keep naming the runner that made the events, not this process.
    writer.pid, writer.host = int(header.get("pid") or 0), str(header.get("host") or "")
    writer.pid_started = header.get("pid_started")
    last_state = await store.fetchall(
        "SELECT body FROM events WHERE run_id = ? AND kind = 'state_changed' AND origin IS NULL"
        " ORDER BY seq DESC LIMIT 1",
        (run_id,),
    )
    asked = await store.fetchall("SELECT call_id FROM approvals WHERE run_id = ?", (run_id,))
    last = EVENT_ADAPTER.validate_json(last_state[0][0]) if last_state else None
    writer.resume_from(
        last.target.value if isinstance(last, StateChanged) else None,
        {str(row[0]) for row in asked},
    )
    corrected: list[str] = []
    writer.on_correction = corrected.append
    await writer.write_back(events)
    said = f"{len(events)} events of run {run_id} brought back from {path}"
    if corrected:
        seq = max(present | {events[-1].seq}) + 1
        await writer.write_back(
            [RunCorrected(run_id=run_id, seq=seq, detail=f"{corrected[0]}; {said}")]
        )
    return said
