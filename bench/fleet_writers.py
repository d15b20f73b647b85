"""A fleet's writers for the benches: N processes, each a host of its own, recording R runs'
events through the real `EventWriter` on one store.

API (import it from another bench: `from fleet_writers import start_writers`):

    writers = start_writers(location, hosts=10, runs_each=100, seconds=20.0, rate=1000.0)
    ...                                  # follow the store meanwhile
    logs = writers.wait()                # list (one per host) of commit logs
    writers.stop()                       # only if leaving early: ends the processes

- `location`: a SQLite path or a `postgresql://` URL (its password from PGPASSWORD, which
  the processes inherit); the store must exist (opened once by the caller, say).
- Each process sets `LOOPDECK_HOST=fleet-host-NN`, opens the store, and for each of its runs
  makes an `EventBus` and an `EventWriter` (batched commits every 50 ms, as a runner's) and
  emits `RunStarted`. Then, for `seconds`, it plays calls round-robin over its runs at
  `rate / hosts` events/s: a call is five events (proposed, to executing, finished, to
  deciding, budget), every tenth call a review verdict too. Every 5 s, from its start, its
  runs' heartbeats are beaten from one thread with its own connection (a real runner has a
  thread and a connection a run; 1,000 connections would not fit). False crash marks undone
  by the writers are said on stderr.
  At the end each run stops (`RunStopped`, goal met) and its writer is closed.
- A commit log is a list of `(run_id, last_seq, committed_at)`: each committed batch, its
  run, its last event number and `time.time()` right after its transaction committed.
- Run ids are `fleet-host-NN-rNNN`.

Run alone: `.venv/bin/python bench/fleet_writers.py --child …` is what `start_writers` spawns.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from loopdeck.core.events import (
    BudgetUpdated,
    CallProposed,
    CallStatus,
    EventBus,
    ReviewVerdict,
    RunStarted,
    RunStopped,
    StateChanged,
    ToolFinished,
)
from loopdeck.core.states import RunState, StopReason
from loopdeck.store.base import Location, Store, StoreError
from loopdeck.store.opening import open_store
from loopdeck.store.writer import EventWriter

CommitLog = list[tuple[str, int, float]]
BEAT_EVERY_S = 5.0
EVENTS_PER_CALL = 5


@dataclass
class Writers:
    """The writer processes started by `start_writers`."""

    processes: list[subprocess.Popen[bytes]]
    logs: list[Path]
    folder: tempfile.TemporaryDirectory[str] | None = field(default=None, repr=False)

    def wait(self, timeout_s: float | None = None) -> list[CommitLog]:
        """Each host's commit log, once every process ended; a process that failed raises."""
        for proc in self.processes:
            proc.wait(timeout=timeout_s)
        failed = [p.args for p in self.processes if p.returncode != 0]
        if failed:
            raise RuntimeError(f"fleet writers failed: {failed}")
        logs = [[tuple(entry) for entry in json.loads(path.read_text())] for path in self.logs]
        if self.folder is not None:
            self.folder.cleanup()
        return logs  # type: ignore[return-value]

    def stop(self) -> None:
        for proc in self.processes:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def host_name(index: int) -> str:
    return f"fleet-host-{index:02d}"


def start_writers(
    location: Location,
    *,
    hosts: int = 10,
    runs_each: int = 100,
    seconds: float = 20.0,
    rate: float = 1000.0,
) -> Writers:
    """Start `hosts` writer processes, `runs_each` runs each, `rate` events/s in all."""
    folder = tempfile.TemporaryDirectory(prefix="fleet-writers-")
    processes, logs = [], []
    for index in range(hosts):
        log = Path(folder.name) / f"{host_name(index)}.json"
        argv = [
            sys.executable, __file__, "--child", "--location", str(location),
            "--host", host_name(index), "--runs", str(runs_each), "--seconds", str(seconds),
            "--rate", str(rate / hosts), "--log", str(log),
        ]  # fmt: skip
        env = {**os.environ, "LOOPDECK_HOST": host_name(index), "LOOPDECK_TUNING": "off"}
        processes.append(subprocess.Popen(argv, env=env))
        logs.append(log)
    return Writers(processes, logs, folder)


class LoggedWriter(EventWriter):
    """The real writer, noting when each batch's transaction committed."""

    def __init__(self, store: object, log: CommitLog) -> None:
        super().__init__(store)  # type: ignore[arg-type]
        self.log = log

    async def commit(self, batch):  # type: ignore[no-untyped-def]
        await super().commit(batch)
        self.log.append((batch[0][0].run_id, batch[-1][0].seq, time.time()))


def _call(bus: EventBus, run_id: str, n: int) -> None:
    """One read call as a runtime records it: five events, a review every tenth call."""
    call_id = f"c{n}"
    bus.emit(CallProposed, run_id=run_id, call_id=call_id, round=1, tool="poll",
             args={"job": "j1"}, risk="read", fingerprint="abc123abc123",
             state_hash="def456def456")  # fmt: skip
    bus.emit(StateChanged, run_id=run_id, source=RunState.DECIDING, target=RunState.EXECUTING)
    bus.emit(ToolFinished, run_id=run_id, call_id=call_id, tool="poll",
             status=CallStatus.EXECUTED, result={"ok": True, "data": {"n": n}, "error": None},
             duration_ms=0.1)  # fmt: skip
    bus.emit(StateChanged, run_id=run_id, source=RunState.EXECUTING, target=RunState.DECIDING)
    bus.emit(BudgetUpdated, run_id=run_id, cost_unknown_calls=0,
             usage={"tokens": (n * 300.0, 1e6), "cost_usd": (n * 0.001, 5.0),
                    "turns": (float(n), 400.0), "deadline_s": (n * 0.5, 3600.0)})  # fmt: skip
    if n % 10 == 0:
        bus.emit(ReviewVerdict, run_id=run_id, round=n // 10, verdict="fail",
                 reasons=[f"order {n} not refunded yet"], before_hash="a",
                 after_hash="b")  # fmt: skip


async def _host(args: argparse.Namespace) -> CommitLog:
    store = await open_store(args.location, create=False)
    log: CommitLog = []
    buses: list[tuple[str, EventBus, LoggedWriter]] = []
    run_ids: list[str] = []
    corrected: list[str] = []
    stop = threading.Event()
    beating = threading.Thread(target=_beat, args=(store, run_ids, stop), daemon=True)
    beating.start()
    try:
        for i in range(args.runs):
            run_id = f"{args.host}-r{i:03d}"
            bus, writer = EventBus(), LoggedWriter(store, log)
            writer.on_correction = corrected.append
            run_ids.append(run_id)
            bus.subscribe(writer)
            writer.start()
            bus.emit(RunStarted, run_id=run_id, env="fleet", script="bench", model="scripted",
                     mode="rounds", goal="keep up", budget={"max_turns": 400})  # fmt: skip
            bus.emit(StateChanged, run_id=run_id, source=RunState.READY, target=RunState.DECIDING)
            buses.append((run_id, bus, writer))
        await _play(args, buses)
        for run_id, bus, _ in buses:
            bus.emit(StateChanged, run_id=run_id, source=RunState.DECIDING,
                     target=RunState.COMPLETE)  # fmt: skip
            bus.emit(RunStopped, run_id=run_id, state=RunState.COMPLETE,
                     stop_reason=StopReason.GOAL_MET, detail="bench over")  # fmt: skip
        await asyncio.gather(*(writer.close() for _, _, writer in buses))
    finally:
        stop.set()
        await store.close()
    if corrected:  # a fleet marked live runs crashed: their writers undid it
        print(f"{args.host}: {len(corrected)} false crash marks undone", file=sys.stderr)
    return log


async def _play(args: argparse.Namespace, buses: list) -> None:  # type: ignore[type-arg]
    calls_per_s = args.rate / EVENTS_PER_CALL
    start = time.monotonic()
    end, n = start + args.seconds, 0
    while (now := time.monotonic()) < end:
        due = int((now - start) * calls_per_s)
        while n < due:
            run_id, bus, _ = buses[n % len(buses)]
            _call(bus, run_id, n // len(buses) + 1)
            n += 1
        await asyncio.sleep(0.005)


def _beat(store: Store, run_ids: list[str], stop: threading.Event) -> None:
    """The host's runs beat from their start, on a thread and connection of their own as a
    runner's heartbeat does (`store/liveness.py`): a fleet marks a run silent for longer than
    its crash silence (30 s) crashed, and a loaded machine takes that long to get a turn on
    the host's one connection for the runs' 100 writers."""
    beats = store.open_beats(BEAT_EVERY_S)
    try:
        while not stop.wait(BEAT_EVERY_S):
            now = time.time()
            for run_id in list(run_ids):
                with contextlib.suppress(StoreError):  # the next beat tries again
                    beats.beat(run_id, now)
    finally:
        beats.close()


def _child() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--child", action="store_true")
    parser.add_argument("--location", required=True)
    parser.add_argument("--host", required=True)
    parser.add_argument("--runs", type=int, required=True)
    parser.add_argument("--seconds", type=float, required=True)
    parser.add_argument("--rate", type=float, required=True)
    parser.add_argument("--log", required=True)
    args = parser.parse_args()
    if not args.location.startswith(("postgresql://", "postgres://")):
        args.location = Path(args.location)
    log = asyncio.run(_host(args))
    Path(args.log).write_text(json.dumps(log))


if __name__ == "__main__":
    _child()
