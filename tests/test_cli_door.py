"""The command line reaches the store through `operator/records.py` only, and a command read
from the store still says what became of a run whose runner died."""

from __future__ import annotations

import ast
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from store_helpers import loopdeck

from loopdeck.cli import main
from loopdeck.cli.parser import STORE_COMMANDS
from loopdeck.cli.store_commands import COMMANDS
from loopdeck.store.liveness import this_host
from loopdeck.store.opening import open_store

CLI = Path(__file__).resolve().parents[1] / "src" / "loopdeck" / "cli"


def _store_imports(path: Path) -> list[str]:
    """The `loopdeck.store` modules a module imports, at its top or inside a function."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        names = []
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        found += [name for name in names if name.split(".")[:2] == ["loopdeck", "store"]]
    return found


def test_the_cli_imports_no_store_module_but_its_light_names() -> None:
    """`loopdeck.store.base` holds the store's location rules and its error (no engine);
    everything else the CLI needs of the store it gets from `loopdeck.operator`."""
    beyond = {}
    for path in sorted(CLI.glob("*.py")):
        if modules := [m for m in _store_imports(path) if m != "loopdeck.store.base"]:
            beyond[path.name] = modules
    assert beyond == {}


def test_every_store_command_has_its_function() -> None:
    consoles = {"attach", "replay"}  # open the console, not a store command's function
    assert set(COMMANDS) == set(STORE_COMMANDS) - consoles


async def _a_run_whose_runner_died(db: Path) -> str:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    store = await open_store(db)
    try:
        await store.execute(
            "INSERT INTO runs (run_id, env, script, model, mode, goal, state, started_at, pid,"
            " host, heartbeat_at, approve_mode) VALUES (?, 'e', 's', 'scripted', 'rounds', 'g',"
            " 'awaiting_approval', '2026-01-01T00:00:00+00:00', ?, ?, ?, 'wait')",
            ("r-dead", dead.pid, this_host(), time.time()),
        )
        await store.execute(
            "INSERT INTO approvals (run_id, call_id, tool, args, requested_at, expires_at, state)"
            " VALUES ('r-dead', 'c1', 'write', '{}', '2026-01-01T00:00:01+00:00',"
            " '2999-01-01T00:00:00+00:00', 'pending')"
        )
    finally:
        await store.close()
    return "r-dead"


@pytest.mark.parametrize("command", ["runs", "pending"])
def test_a_listing_says_a_dead_runners_run_crashed(tmp_path, capsys, command) -> None:
    """Readers of the store do not write; the CLI marks such a run crashed, in its own
    transaction, before it lists runs or what waits for the operator."""
    db = tmp_path / "store.db"
    run_id = asyncio.run(_a_run_whose_runner_died(db))
    assert main([command, "--json", "--db", str(db)]) == 0
    listed = json.loads(capsys.readouterr().out.splitlines()[-1])
    if command == "pending":
        assert listed == []  # the crash withdrew the write that waited
        assert main(["runs", "--json", "--db", str(db)]) == 0
        listed = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert [(r["run_id"], r["state"], r["stop_reason"]) for r in listed] == [
        (run_id, "stopped", "crashed")
    ]


def _a_zombie() -> subprocess.Popen[bytes]:
    """A child killed and never reaped: its pid still answers kill 0, its state is `Z`."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    child.kill()
    stat = Path(f"/proc/{child.pid}/stat")
    deadline = time.monotonic() + 30
    while stat.read_text().rsplit(")", 1)[1].split()[0] != "Z":
        assert time.monotonic() < deadline, "the killed child never became a zombie"
    return child  # kept: dropping it would let subprocess reap it


async def _a_run_waiting(db: Path, pid: int, state: str, call_id: str, tool: str) -> str:
    """A run whose runner is `pid` on this host, waiting (`state`) on one request."""
    args = json.dumps({"question": "which order?"} if tool == "ask_user" else {"id": 1})
    store = await open_store(db)
    try:
        await store.execute(
            "INSERT INTO runs (run_id, env, script, model, mode, goal, state, started_at, pid,"
            " host, heartbeat_at, approve_mode) VALUES ('r-w', 'e', 's', 'scripted', 'rounds',"
            " 'g', ?, '2026-01-01T00:00:00+00:00', ?, ?, ?, 'wait')",
            (state, pid, this_host(), time.time()),
        )
        await store.execute(
            "INSERT INTO approvals (run_id, call_id, tool, args, requested_at, expires_at, state)"
            " VALUES ('r-w', ?, ?, ?, '2026-01-01T00:00:01+00:00', '9999-12-31T23:59:59+00:00',"
            " 'pending')",
            (call_id, tool, args),
        )
    finally:
        await store.close()
    return "r-w"


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
def test_a_zombie_runner_is_gone_and_its_question_is_not_answered(tmp_path, capsys) -> None:
    zombie = _a_zombie()
    db = tmp_path / "store.db"
    try:
        run_id = asyncio.run(_a_run_waiting(db, zombie.pid, "awaiting_answer", "q1", "ask_user"))
        assert main(["answer", run_id, "ORD-1", "--db", str(db)]) != 0
        assert "runner is gone" in capsys.readouterr().err
        assert main(["runs", "--json", "--db", str(db)]) == 0
        [run] = json.loads(capsys.readouterr().out.splitlines()[-1])
        assert (run["state"], run["stop_reason"]) == ("stopped", "crashed")
    finally:
        zombie.wait()


def test_approving_a_question_points_to_answer(tmp_path) -> None:
    db = tmp_path / "store.db"
    run_id = asyncio.run(_a_run_waiting(db, os.getpid(), "awaiting_answer", "q1", "ask_user"))
    approved = loopdeck("approve", run_id, "q1", db=db)
    assert approved.returncode == 1
    assert "q1: is a question the run asked, not a write" in approved.stderr
    assert f"loopdeck answer {run_id} TEXT" in approved.stderr
    assert "already decided" not in approved.stderr


def test_answering_a_run_that_waits_for_approval_points_to_approve(tmp_path) -> None:
    db = tmp_path / "store.db"
    run_id = asyncio.run(_a_run_waiting(db, os.getpid(), "awaiting_approval", "c1", "refund"))
    answered = loopdeck("answer", run_id, "c1", db=db)
    assert answered.returncode == 1
    assert "has no question waiting; its write c1 waits for approval" in answered.stderr
    assert f"loopdeck approve {run_id} c1" in answered.stderr
    assert f"loopdeck reject {run_id} c1" in answered.stderr


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A folder with a short path: the runs table's title names the store's path, and a test's
    tmp_path is long (longer still under a pytest-xdist worker, `popen-gw0/` in it)."""
    with tempfile.TemporaryDirectory(prefix="ld-") as folder:
        yield Path(folder)


def test_runs_at_100_columns_shows_whole_ids_newest_first(short_dir) -> None:
    db = short_dir / "store.db"
    ids = {"2026-01-01T00:00:00+00:00": "0ld3r0ld3r00", "2026-01-02T00:00:00+00:00": "n3w3rn3w3r00"}

    async def two_runs() -> None:
        store = await open_store(db)
        try:
            for started, run_id in ids.items():
                await store.execute(
                    "INSERT INTO runs (run_id, env, script, model, mode, goal, state, stop_reason,"
                    " started_at, tokens, cost_usd) VALUES (?, 'order_support', 'wrong-guess',"
                    " 'openai/gpt-4o-mini', 'rounds', 'g', 'stopped', 'no_progress', ?, 123456,"
                    " 0.5)",
                    (run_id, started),
                )
        finally:
            await store.close()

    asyncio.run(two_runs())
    listed = subprocess.run(
        [sys.executable, "-m", "loopdeck", "runs", "--db", str(db)],
        capture_output=True, text=True, timeout=60, check=True,
        env={**os.environ, "COLUMNS": "100"},
    )  # fmt: skip
    lines = listed.stdout.splitlines()
    assert max(len(line) for line in lines) <= 100
    shown = [
        line.split()[0]
        for line in lines
        if line.split()[:1] in (["0ld3r0ld3r00"], ["n3w3rn3w3r00"])
    ]
    assert shown == ["n3w3rn3w3r00", "0ld3r0ld3r00"]
    assert "newest first" in listed.stdout
    as_json = loopdeck("runs", "--json", db=db)
    runs = json.loads(as_json.stdout.splitlines()[-1])
    assert [run["run_id"] for run in runs] == ["n3w3rn3w3r00", "0ld3r0ld3r00"]
    assert set(runs[0]) == {
        "run_id", "env", "script", "model", "state", "stop_reason", "started_at", "ended_at",
        "tokens", "cost_usd", "host", "pid", "outcome_unknown", "paused",
    }  # fmt: skip
    helped = loopdeck("--help", db=db)
    assert "newest first" in " ".join(helped.stdout.split())
