"""An `[mcp]` env on a worker that is lost: a server over HTTP keeps the state, so the run goes
on on another worker; a server the lost worker started took the state with it, so the run
ends `crashed` naming why (issue 42)."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from worker_helpers import lease_state, significant, stored, with_a_worker

from loopdeck.core.events import Event, EventBus, RunStopped, ToolFinished
from loopdeck.core.recorded_inputs import record_inputs
from loopdeck.core.replay_events import RunMoved
from loopdeck.operator.launch import RunOptions, prepare_run
from loopdeck.operator.placement import submitted
from loopdeck.store import leases
from loopdeck.store.opening import open_store
from loopdeck.store.writer import EventWriter

SAMPLE = Path(__file__).resolve().parents[1] / "sample_envs" / "notes_mcp"
NOTES = '{"draft": "x", "release": "v1.1 shipped"}'
GONE = leases.WorkerName("host-a", 1, "gone")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _serve(folder: Path) -> tuple[subprocess.Popen[bytes], int]:
    """The sample's server over streamable HTTP, keeping its notes in `folder`."""
    folder.mkdir()
    (folder / "notes.json").write_text(NOTES)
    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, str(SAMPLE / "server.py"), "--http", str(port)],
        cwd=folder, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    return server, port


async def _listening(port: int) -> None:
    for _ in range(2400):  # a loaded machine: up to two minutes
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        await asyncio.sleep(0.05)
    raise AssertionError(f"the MCP server never listened on {port}")


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for server in started:
        server.terminate()
        server.wait(30)


def _env_over_http(env: Path, port: int, served: Path) -> Path:
    """The sample env with its server at `port`; the goal checked where it keeps its notes."""
    env.mkdir()
    scenario = (SAMPLE / "scenario.toml").read_text(encoding="utf-8")
    scenario = scenario.replace(
        'command = ["{python}", "{envdir}/server.py"]', f'url = "http://127.0.0.1:{port}/mcp"'
    ).replace(
        'goal_check = ["{python}", "{envdir}/check_goal.py"]',
        f'goal_check = ["sh", "-c", "cd {served} && exec \\"$0\\" \\"$@\\"", "{{python}}",'
        f' "{SAMPLE / "check_goal.py"}"]',
    )
    (env / "scenario.toml").write_text(scenario, encoding="utf-8")
    return env


async def _whole(run: RunOptions) -> list[Event]:
    """The events of the run when no worker is lost, its inputs recorded."""
    bus = EventBus()
    events: list[Event] = []
    bus.subscribe(events.append)
    prepared = prepare_run(run, bus=bus)
    record_inputs(prepared.runtime)
    try:
        await prepared.runtime.run()
    finally:
        prepared.cleanup()
    return events


async def _left_by_host_a(db: Path, run_id: str, log: list[Event], run: RunOptions) -> None:
    store = await open_store(db)
    try:
        await leases.submit(store, run_id, submitted(run))
        claim = await leases.claim(store, GONE, 0.001)
        assert claim is not None and claim.run_id == run_id
        writer = EventWriter(store, approve_mode=str(run.approve), fence=(run_id, claim.epoch))
        writer.host, writer.pid = "host-a", 1
        await writer.write_back(log)
    finally:
        await store.close()


def _cut_after_first_read(whole: list[Event]) -> int:
    """Lost after its first tool ran (a read): the server's notes are still the first."""
    first = next(i for i, e in enumerate(whole) if isinstance(e, ToolFinished))
    assert whole[first].tool == "list_notes"
    return first + 1


async def _after_a_worker(db: Path) -> list[Event]:
    """The run's log once a worker of this process took it over and it ended."""
    store = await open_store(db)
    try:

        async def ended() -> bool:
            return await lease_state(store, "r1") == "ended"

        await with_a_worker(db, ended)
        return await stored(store, "r1")
    finally:
        await store.close()


@pytest.mark.slow
async def test_a_run_on_a_server_over_http_goes_on_on_another_worker(
    tmp_path: Path, servers: list[subprocess.Popen[bytes]]
) -> None:
    first, first_port = _serve(tmp_path / "first")
    servers.append(first)
    await _listening(first_port)
    env = _env_over_http(tmp_path / "env_first", first_port, tmp_path / "first")
    run = RunOptions(env=str(env), script="solve", approve="auto", run_id="r1")
    whole = await _whole(run)
    assert isinstance(whole[-1], RunStopped) and whole[-1].stop_reason.value == "goal_met"

    # The same run on a server of its own, its worker lost after the first read.
    second, port = _serve(tmp_path / "second")
    servers.append(second)
    await _listening(port)
    env = _env_over_http(tmp_path / "env_second", port, tmp_path / "second")
    run = RunOptions(env=str(env), script="solve", approve="auto", run_id="r1")
    cut = _cut_after_first_read(whole)
    db = tmp_path / "s.db"
    await _left_by_host_a(db, "r1", whole[:cut], run)
    log = await _after_a_worker(db)
    assert [e.seq for e in log] == list(range(1, len(log) + 1))
    stop = log[-1]
    assert isinstance(stop, RunStopped) and stop.stop_reason.value == "goal_met", stop.detail
    moved = [e for e in log if isinstance(e, RunMoved)]
    assert len(moved) == 1 and moved[0].was == "host-a" and "lease expired" in moved[0].note
    assert significant(log) == significant(whole)


@pytest.mark.slow
async def test_a_run_on_a_server_its_lost_worker_started_ends_crashed_naming_why(
    tmp_path: Path,
) -> None:
    run = RunOptions(env=str(SAMPLE), script="solve", approve="auto", run_id="r1")
    whole = await _whole(run)
    cut = _cut_after_first_read(whole)
    db = tmp_path / "s.db"
    await _left_by_host_a(db, "r1", whole[:cut], run)
    log = await _after_a_worker(db)
    assert [e.seq for e in log] == list(range(1, cut + 2))
    stop = log[-1]
    assert isinstance(stop, RunStopped) and stop.stop_reason.value == "crashed"
    assert "its worker was lost and it cannot go on" in stop.detail, stop.detail
    assert "its MCP server was started by its worker ([mcp] command)" in stop.detail
