"""`loopdeck resume` says what will happen: a run no worker holds (parked while paused) goes
on once a free worker takes it up, and when no worker runs for its store (`store/presence.py`),
nothing happens until one starts (it said `resume sent`, as to a run its runner would take it
from at once)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from loopdeck.cli import main
from loopdeck.store import leases, presence
from loopdeck.store.base import Store
from loopdeck.store.opening import open_store

HOST_A = leases.WorkerName("host-a", 1, "aaaa")


async def _placed(store: Store, run_id: str, *, paused: bool, parked: bool) -> None:
    """A submitted run claimed by host-a, then (`parked`) let go as parked."""
    await leases.submit(store, run_id, {})
    claim = await leases.claim(store, HOST_A, 60.0)
    assert claim is not None and claim.run_id == run_id
    await store.execute(
        "INSERT INTO runs (run_id, state, paused) VALUES (?, 'deciding', ?)",
        (run_id, int(paused)),
    )
    if parked:
        await leases.let_go(store, run_id, claim.epoch, leases.PARKED, "parked by host-a")


def _resumed(db: Path, run_id: str, capsys: Any, *json_flag: str) -> str:
    assert main(["resume", run_id, "--db", str(db), *json_flag]) == 0
    out: str = capsys.readouterr().out
    return out


def test_a_resume_of_a_parked_run_says_a_worker_takes_it_up_and_none_runs(
    tmp_path: Path, capsys: Any
) -> None:
    db = tmp_path / "s.db"

    async def placed() -> None:
        store = await open_store(db)
        try:
            await _placed(store, "parked1", paused=True, parked=True)
        finally:
            await store.close()

    asyncio.run(placed())
    said = _resumed(db, "parked1", capsys)
    assert said.startswith(
        "parked1: resume sent; it is parked (no worker holds it): the next worker with a free"
        f" slot takes it up, and it goes on; no worker runs for {db}:"
    ), said
    assert f"nothing happens until one starts (loopdeck worker --db {db})" in said, said


def test_a_resume_of_a_parked_run_while_a_worker_runs_says_only_it_goes_on(
    tmp_path: Path, capsys: Any
) -> None:
    db = tmp_path / "s.db"

    async def placed() -> None:
        store = await open_store(db)
        try:
            await _placed(store, "parked1", paused=True, parked=True)
            await _placed(store, "held1", paused=False, parked=False)  # host-a's, live
            await presence.arrive(store, HOST_A.holder, "host-a", 1, 4, 600.0)  # 3 slots free
        finally:
            await store.close()

    asyncio.run(placed())
    said = json.loads(_resumed(db, "parked1", capsys, "--json"))
    assert said["sent"] is True and said["held"] is False
    assert said["message"].endswith("takes it up, and it goes on"), said


def test_a_resume_of_a_run_its_worker_holds_is_said_sent(tmp_path: Path, capsys: Any) -> None:
    db = tmp_path / "s.db"

    async def placed() -> None:
        store = await open_store(db)
        try:
            await _placed(store, "held1", paused=True, parked=False)
        finally:
            await store.close()

    asyncio.run(placed())
    assert _resumed(db, "held1", capsys) == "held1: resume sent\n"


def test_a_cancel_or_a_message_to_a_parked_run_says_a_worker_takes_it_up(
    tmp_path: Path, capsys: Any
) -> None:
    """A cancel, a kill or a message to a run no worker holds waits for a free worker, as a
    resume does: said so (they said `sent`, as to a runner that takes them at once)."""
    db = tmp_path / "s.db"

    async def placed() -> None:
        store = await open_store(db)
        try:
            await _placed(store, "parked1", paused=False, parked=True)
        finally:
            await store.close()

    asyncio.run(placed())
    for argv, said_as in (
        (["message", "parked1", "look again"], "message sent (10 characters)"),
        (["cancel", "parked1"], "cancel sent"),
        (["cancel", "parked1", "--now"], "kill sent"),
    ):
        assert main([*argv, "--db", str(db)]) == 0, argv
        said = " ".join(capsys.readouterr().out.split())
        assert said.startswith(f"parked1: {said_as}; it is parked (no worker holds it)"), said
        assert "the next worker with a free slot takes it up, and" in said, said
