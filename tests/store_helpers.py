"""Runners in other processes, and waiting on what they record."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from loopdeck.store import queries
from loopdeck.store.database import Store


def loopdeck(*args: str, db: Path, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "loopdeck", *args, "--db", str(db)],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def start_runner(env: str | Path, script: str, db: Path, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "loopdeck", "run", str(env), "--script", script, "--headless",
         "--json", "--db", str(db), *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip


def last_json(text: str) -> Any:
    return json.loads([line for line in text.splitlines() if line.strip()][-1])


async def wait_for_pending(db: Path, timeout: float = 30.0) -> dict[str, Any]:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if db.exists():
            store = await Store.open(db)
            try:
                pending = await queries.pending_approvals(store)
            finally:
                await store.close()
            if pending:
                return pending[0]
        await asyncio.sleep(0.1)
    raise AssertionError("no approval became pending")
