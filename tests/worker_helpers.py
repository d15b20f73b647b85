"""Runs on workers in the tests: a run's events as an uninterrupted run makes them, a run left
by a lost worker (its log cut where the worker was lost, its lease run out, its env's folder
as the run left it), and a worker of this process until a condition holds."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from conftest import SAMPLES

from loopdeck.core.events import Event, EventBus, StateSeen
from loopdeck.core.recorded_inputs import record_inputs
from loopdeck.core.replay_log import key
from loopdeck.operator.launch import RunOptions, prepare_run
from loopdeck.operator.placement import submitted
from loopdeck.operator.worker import Worker
from loopdeck.store import leases
from loopdeck.store.base import Location, Store
from loopdeck.store.writer import EventWriter

SHARED = SAMPLES / "shared_orders"
BOUND_S = 120.0  # a condition not met by then is a failure (a loaded 2-core machine)


def options(root: Path, script: str = "solve", approve: str = "auto", **more: Any) -> RunOptions:
    return RunOptions(env=str(SHARED), script=script, approve=approve,  # type: ignore[arg-type]
                      settings=[f'data.state_root="{root}"'], **more)  # fmt: skip


async def uninterrupted(root: Path, run_id: str, script: str = "solve") -> list[Event]:
    """The events of the run as it goes when no worker is lost, its inputs recorded."""
    bus = EventBus()
    events: list[Event] = []
    bus.subscribe(events.append)
    prepared = prepare_run(options(root, script, run_id=run_id), bus=bus)
    prepared.runtime.env.reopen(run_id)  # type: ignore[attr-defined]
    record_inputs(prepared.runtime)
    try:
        await prepared.runtime.run()
    finally:
        prepared.cleanup()
    return events


def significant(events: list[Any]) -> list[tuple[Any, ...]]:
    return [k for k in map(key, events) if k is not None]


async def left_by_a_lost_worker(
    store: Store, root: Path, run_id: str, log: list[Event], run: RunOptions
) -> None:
    """The run as a worker on host-a left it, lost after `log`: queued, claimed, its log
    written under that lease (which has run out), its orders as it last saw them."""
    await leases.submit(store, run_id, submitted(run))
    gone = leases.WorkerName("host-a", 1, "gone")
    claim = await leases.claim(store, gone, 0.001)
    assert claim is not None and claim.run_id == run_id
    writer = EventWriter(store, approve_mode=str(run.approve), fence=(run_id, claim.epoch))
    writer.host, writer.pid = "host-a", 1
    await writer.write_back(log)
    seen = next(e for e in reversed(log) if isinstance(e, StateSeen))
    folder = root / run_id
    folder.mkdir(parents=True, exist_ok=True)
    assert seen.snapshot is not None
    (folder / "orders.json").write_text(json.dumps(seen.snapshot["orders"], sort_keys=True))
    (folder / "writes.log").unlink(missing_ok=True)


async def with_a_worker(
    location: Location, until: Callable[[], Awaitable[bool]], slots: int = 4, notify: Any = None
) -> Worker:
    """A worker of this process, claiming and running, until `until()` holds; then stopped.
    `notify`: its `--notify` settings."""
    said: list[str] = []
    worker = Worker(location, slots=slots, say=said.append, notify=notify)
    stop = asyncio.Event()
    task = asyncio.create_task(worker.run(stop))
    end = time.monotonic() + BOUND_S
    try:
        while not await until():
            assert not task.done(), f"the worker stopped: {said}"
            assert time.monotonic() < end, f"never happened; the worker said: {said}"
            await asyncio.sleep(0.05)
    finally:
        stop.set()
        await task
    worker.said = said  # type: ignore[attr-defined]
    return worker


async def stored(store: Store, run_id: str) -> list[Event]:
    from loopdeck.operator.resume import load_log

    return await load_log(store, run_id)


async def lease_state(store: Store, run_id: str) -> str | None:
    row = await leases.placement(store, run_id)
    return None if row is None else str(row["state"])


def writes(root: Path, run_id: str) -> list[dict[str, Any]]:
    log = root / run_id / "writes.log"
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
