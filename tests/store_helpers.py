"""Runners in other processes, and waiting on what they record."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from loopdeck.store import queries
from loopdeck.store.base import Location, Store, StoreError
from loopdeck.store.opening import open_store


def loopdeck(
    *args: str, db: Location, timeout: float = 60, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "loopdeck", *args, "--db", str(db)],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env=None if env is None else {**os.environ, **env},
    )


def start_runner(
    env: str | Path, script: str, db: Location, *extra: str, environ: dict[str, str] | None = None
) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "loopdeck", "run", str(env), "--script", script, "--headless",
         "--json", "--db", str(db), *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=None if environ is None else {**os.environ, **environ},
    )  # fmt: skip


def store_exists(db: Location) -> bool:
    """A SQLite file is there; a PostgreSQL database always is (its schema may not be yet)."""
    return not isinstance(db, Path) or db.exists()


async def open_existing(db: Location) -> Store | None:
    """The store, once its first runner created it; None until then."""
    if not store_exists(db):
        return None
    try:
        return await open_store(db, create=False)
    except StoreError:
        return None


def listed_runs(db: Location, env: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """`loopdeck runs --json`, or nothing while the store is not there yet."""
    if not store_exists(db):
        return []
    done = loopdeck("runs", "--json", db=db, env=env)
    return list(last_json(done.stdout)) if done.returncode == 0 and done.stdout.strip() else []


def last_json(text: str) -> Any:
    return json.loads([line for line in text.splitlines() if line.strip()][-1])


LOADED_BOUND_S = 120.0  # a wait that fails only when something is really stuck


async def wait_for_pending(
    db: Location, timeout: float = LOADED_BOUND_S, call_id: str | None = None
) -> dict[str, Any]:
    """The first write waiting for approval (or the one named) once there is one. The bound
    is a loaded CI's: a runner starting with both cores busy takes many times its quiet
    start (a run's LiteLLM import alone)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        store = await open_existing(db)
        if store is not None:
            try:
                pending = await queries.pending_approvals(store)
            finally:
                await store.close()
            for item in pending:
                if call_id is None or item["call_id"] == call_id:
                    return item
        await asyncio.sleep(0.05)
    raise AssertionError(f"{call_id or 'no approval'} never waited for approval")
