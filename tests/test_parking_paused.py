"""A run its operator paused holds no worker: held past `LOOPDECK_PARK_AFTER_S` where stops
land, its worker parks it (its slot freed, `runs` saying it paused and parked); a resume sent
to it makes it claimable, and a free worker rebuilds it from its log and goes on, unpaused; a
cancel ends it. A decision alone does not wake it: it waits for its resume."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from worker_helpers import lease_state, options, stored, with_a_worker, writes

from loopdeck.cli import main
from loopdeck.core.events import (
    ModelReplied,
    OperatorCommand,
    RunMoved,
    RunStopped,
    ToolFinished,
)
from loopdeck.operator.entries import run_entry
from loopdeck.operator.placement import submit
from loopdeck.store import deciding, leases, queries
from loopdeck.store.base import Store
from loopdeck.store.opening import open_store


def _slow(root: Path) -> Any:
    """A run that never waits on a decision, its order system slow enough to be paused
    while it runs."""
    run = options(root, approve="auto")
    run.settings.append("data.step_s=0.2")
    return run


class PausedWhileItRuns:
    """Pauses the run once a tool of it has finished; then, parked, notes what its lease and
    `runs` say of it."""

    def __init__(self, store: Store, run_id: str) -> None:
        self.store, self.run_id = store, run_id
        self.paused = False
        self.parked: dict[str, Any] | None = None
        self.entry: Any = None

    async def parked_now(self) -> bool:
        if not self.paused:
            log = await stored(self.store, self.run_id)
            if any(isinstance(e, ToolFinished) for e in log):
                why = await deciding.pause_or_resume(self.store, self.run_id, "pause", "op")
                assert why is None, why
                self.paused = True
            return False
        if self.parked is None and await lease_state(self.store, self.run_id) == leases.PARKED:
            self.parked = await leases.placement(self.store, self.run_id)
            self.entry = await run_entry(self.store, self.run_id)
        return self.parked is not None


def _parked_as_paused(paused: PausedWhileItRuns, said: list[str]) -> None:
    run_id = paused.run_id
    assert paused.parked is not None
    assert "waits for its resume (paused)" in str(paused.parked["note"]), paused.parked
    assert paused.parked["holder"] is None  # no worker's slot
    assert any(line.startswith(f"run {run_id}: parked by") for line in said), said
    entry = paused.entry
    assert entry is not None and entry.paused and entry.shown_state == "parked"


@pytest.mark.slow
async def test_a_paused_run_is_parked_and_goes_on_unpaused_once_resumed(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """Its slot taken by another run while it is parked; resumed, it runs on from where it
    was paused, each write once, to its end."""
    monkeypatch.setenv("LOOPDECK_PARK_AFTER_S", "0.3")
    db = tmp_path / "s.db"
    run_id = await submit(db, _slow(tmp_path))
    other = await submit(db, options(tmp_path))  # claimed only once the first one is parked
    store = await open_store(db)
    try:
        paused = PausedWhileItRuns(store, run_id)
        resumed: list[bool] = []

        async def ended() -> bool:
            if not resumed:
                if not await paused.parked_now() or await lease_state(store, other) != "ended":
                    return False
                assert await deciding.pause_or_resume(store, run_id, "resume", "op") is None
                resumed.append(True)
            return await lease_state(store, run_id) == "ended"

        worker = await with_a_worker(db, ended, slots=1)
        _parked_as_paused(paused, worker.said)  # type: ignore[attr-defined]
        log = await stored(store, run_id)
        assert [e.seq for e in log] == list(range(1, len(log) + 1))
        said = [(e.command, e.by) for e in log if isinstance(e, OperatorCommand)]
        assert said == [("pause", "op"), ("resume", "op")]
        moves = [e.note for e in log if isinstance(e, RunMoved)]
        assert len(moves) == 1 and "for its operator's command" in moves[0], moves
        assert isinstance(log[-1], RunStopped) and log[-1].stop_reason.value == "goal_met"
        assert [w["tool"] for w in writes(tmp_path, run_id)] == [
            "add_note", "update_delivery_address"
        ]  # fmt: skip
        entry = await run_entry(store, run_id)
        assert entry is not None and not entry.paused
    finally:
        await store.close()


async def test_a_parked_paused_run_is_ended_by_a_cancel(
    tmp_path: Path, monkeypatch: Any, capsys: Any
) -> None:
    """Parked while paused (`runs` says both), a cancel sent to it makes it claimable: the
    worker that takes it up ends it `cancelled`, with no model call nor write after its park."""
    monkeypatch.setenv("LOOPDECK_PARK_AFTER_S", "0.3")
    monkeypatch.setenv("COLUMNS", "200")
    db = tmp_path / "s.db"
    run_id = await submit(db, _slow(tmp_path))
    store = await open_store(db)
    try:
        paused = PausedWhileItRuns(store, run_id)
        done_then: list[list[dict[str, Any]]] = []

        async def ended() -> bool:
            if not done_then:
                if not await paused.parked_now():
                    return False
                done_then.append(writes(tmp_path, run_id))
                assert await asyncio.to_thread(main, ["runs", "--db", str(db)]) == 0
                await queries.send_command(store, run_id, "cancel", "op")
            return await lease_state(store, run_id) == "ended"

        worker = await with_a_worker(db, ended)
        _parked_as_paused(paused, worker.said)  # type: ignore[attr-defined]
        listed = [line for line in capsys.readouterr().out.splitlines() if run_id in line]
        assert len(listed) == 1 and " parked (paused) " in listed[0], listed
        log = await stored(store, run_id)
        stop = log[-1]
        assert isinstance(stop, RunStopped) and stop.stop_reason.value == "cancelled"
        assert "by op" in stop.detail
        moved = next(i for i, e in enumerate(log) if isinstance(e, RunMoved))
        assert not any(isinstance(e, ModelReplied | ToolFinished) for e in log[moved:])
        assert writes(tmp_path, run_id) == done_then[0]
    finally:
        await store.close()


async def test_a_parked_paused_run_is_claimable_by_a_command_not_by_a_decision(db: Any) -> None:
    """Parked with nothing pending, a run that is not paused is claimable (its operator
    decided); a paused one only once a command is sent to it, named as what woke it."""
    store = await open_store(db)
    worker = leases.WorkerName("host-a", 1, "aaaa")
    try:
        for run_id in ("paused", "decided"):
            await leases.submit(store, run_id, {})
            claim = await leases.claim(store, worker, 60.0)
            assert claim is not None and claim.run_id == run_id
            await store.execute(
                "INSERT INTO runs (run_id, state, paused) VALUES (?, 'deciding', ?)",
                (run_id, int(run_id == "paused")),
            )
            await leases.let_go(store, run_id, claim.epoch, leases.PARKED, "parked by host-a")
        other = leases.WorkerName("host-b", 2, "bbbb")
        woken = await leases.claim(store, other, 60.0)
        assert woken is not None and woken.run_id == "decided"
        assert "once its operator decided" in woken.note
        assert await leases.claim(store, other, 60.0) is None
        await queries.send_command(store, "paused", "resume", "op")
        woken = await leases.claim(store, other, 60.0)
        assert woken is not None and woken.run_id == "paused"
        assert woken.note == "resumed on host-b for its operator's command (parked by host-a)"
    finally:
        await store.close()


@pytest.mark.parametrize("command", ["cancel", "kill", "resume"])
async def test_a_paused_run_is_not_parked_once_a_command_that_ends_its_hold_is_taken(
    command: str,
) -> None:
    """A worker takes a command at once, while the pause's own wait ends a step of the loop
    later: in that step the parking watch must not see the run as held. A cancel taken and
    then parked as paused left the run unclaimable (its command consumed, still paused)."""
    from types import SimpleNamespace

    from loopdeck.core.control import Interrupted, RunControl
    from loopdeck.operator.parking import Parking

    control = RunControl(lambda make, **fields: None, "r1")
    parking = Parking(SimpleNamespace(control=control), None, "host-a", None, decisions=False)  # type: ignore[arg-type]
    control.pause("op")
    held = asyncio.create_task(control.checkpoint())
    while not control.pause_holds:
        await asyncio.sleep(0)
    assert parking.waiting() == ("its resume (paused)", None)
    {"cancel": control.request_cancel, "kill": control.request_kill, "resume": control.resume}[
        command
    ]("op")
    assert parking.waiting() is None
    if command == "resume":
        await held
    else:
        with pytest.raises(Interrupted):
            await held
