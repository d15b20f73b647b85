"""`loopdeck submit` and `loopdeck fork` refuse, before anything is queued, what a worker
would refuse: the run prepared as `loopdeck run` prepares it (env folder, script against the
env's tools, --set keys), a fork's env able to rebuild the run up to the fork, an empty
message; an env folder kept by its absolute path. A model's key is the workers' hosts': a
host without it still queues the run."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import SAMPLES

from loopdeck.store.opening import open_store

Cli = Callable[..., tuple[int, dict[str, Any] | None, str]]


def queued(db: Path) -> dict[str, dict[str, Any]]:
    """Every run queued in the store, with its options."""

    async def read() -> list[Any]:
        store = await open_store(db, create=False)
        try:
            return await store.fetchall("SELECT run_id, options FROM leases")
        finally:
            await store.close()

    if not db.exists():
        return {}
    return {str(row[0]): json.loads(row[1]) for row in asyncio.run(read())}


def refused(code: int, err: str, *said: str) -> None:
    """Exit 2, one line naming the problem."""
    assert code == 2, err
    lines = err.strip().splitlines()
    assert lines[0].startswith("loopdeck: ") and all(s in lines[0] for s in said), err


@pytest.fixture
def unknown_tool(tmp_path: Path) -> Path:
    """order_support with its `solve` script's first call naming a tool it does not have."""
    env = tmp_path / "unknown_tool"
    shutil.copytree(SAMPLES / "order_support", env)
    toml = env / "scenario.toml"
    text = toml.read_text()
    assert 'tool = "get_order"' in text
    toml.write_text(text.replace('tool = "get_order"', 'tool = "get_orderz"', 1))
    return env


def broken_env(tmp_path: Path) -> str:
    env = tmp_path / "broken"
    env.mkdir()
    (env / "scenario.toml").write_text("name = [\n")
    return str(env)


FORK_REFUSALS = [
    pytest.param(lambda tmp: ["--env", str(tmp / "nonexistent")],
                 ("nonexistent: no such env folder",), id="no-env-folder"),
    pytest.param(lambda tmp: ["--script", "nosuch"], ("no script named 'nosuch'",),
                 id="no-script"),
    pytest.param(lambda tmp: ["--env", broken_env(tmp)],
                 ("broken/scenario.toml: not valid TOML",), id="broken-toml"),
    pytest.param(lambda tmp: ["--set", "bogus=1"],
                 ("--set bogus=1 (over ", "scenario.toml): invalid scenario"),
                 id="unknown-set-key"),
    pytest.param(lambda tmp: ["--model", "nosuch/model"],
                 ("--model nosuch/model: LiteLLM knows no provider for it",),
                 id="unroutable-model"),
    pytest.param(lambda tmp: ["--message", ""], ("--message: empty",), id="empty-message"),
    pytest.param(lambda tmp: ["--message", "  "], ("--message: empty",), id="blank-message"),
    # another env: the run's calls before c3 used tools it does not have
    pytest.param(lambda tmp: ["--env", str(SAMPLES / "service_outage")],
                 ("cannot be rebuilt up to c3 with env service_outage", "get_order"),
                 id="another-envs-tools"),
]  # fmt: skip


@pytest.mark.parametrize(("flags", "said"), FORK_REFUSALS)
def test_a_fork_a_worker_could_not_run_is_refused_and_nothing_is_queued(
    cli: Cli, solved_run: tuple[Path, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    flags: Callable[[Path], list[str]], said: tuple[str, ...],
) -> None:  # fmt: skip
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    db, run_id = solved_run
    code, _, err = cli("fork", run_id, "--at", "c3", *flags(tmp_path), "--db", str(db))
    refused(code, err, *said)
    assert queued(db) == {}


def test_a_fork_keeps_its_env_folder_by_its_absolute_path(
    cli: Cli, solved_run: tuple[Path, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db, run_id = solved_run
    shutil.copytree(SAMPLES / "order_support", tmp_path / "envs" / "order_support")
    monkeypatch.chdir(tmp_path)
    code, done, err = cli("fork", run_id, "--at", "c3", "--env", "envs/order_support",
                          "--db", str(db), "--json")  # fmt: skip
    assert code == 0 and done is not None, err
    kept = queued(db)[done["run_id"]]
    assert kept["env"] == str((tmp_path / "envs" / "order_support").resolve())
    assert kept["fork"]["source"] == run_id


def test_submit_refuses_a_script_calling_an_unknown_tool_as_run_does(
    cli: Cli, unknown_tool: Path, tmp_path: Path
) -> None:
    db = tmp_path / "s.db"
    ran = cli("run", str(unknown_tool), "--headless", "--db", str(tmp_path / "run.db"))
    code, _, err = cli("submit", str(unknown_tool), "--db", str(db))
    refused(code, err, "script 'solve'", "unknown tool 'get_orderz'")
    assert (code, err) == (ran[0], ran[2])
    assert queued(db) == {}


@pytest.mark.parametrize("model", ["nosuch/model", "my-finetune"])
def test_submit_refuses_a_model_litellm_routes_nowhere(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, model: str
) -> None:
    """Refused before it is queued (not a run that stops `provider_failure` on a worker);
    its key is not asked for: that is the workers' hosts'."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    db = tmp_path / "s.db"
    code, _, err = cli("submit", "order_support", "--model", model, "--approve", "auto",
                       "--db", str(db))  # fmt: skip
    refused(code, err, f"--model {model}: LiteLLM knows no provider for it; name one as")
    assert queued(db) == {}


def test_submit_queues_a_real_model_whose_key_only_the_workers_hold(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`run` refuses a model whose key this host lacks; a submitted run is run by a worker,
    whose host holds it: queued (the worker says so, naming the key, if it does not)."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    db = tmp_path / "s.db"
    flags = ("order_support", "--model", "openai/gpt-4o", "--approve", "auto")
    ran = cli("run", *flags, "--headless", "--db", str(tmp_path / "run.db"))
    assert ran[0] == 2 and "needs OPENAI_API_KEY" in ran[2]
    code, _, err = cli("submit", *flags, "--db", str(db))
    assert code == 0, err
    assert len(queued(db)) == 1


REFUSED_BY_SUBMIT = {
    "--headless": [], "--theme": ["dark"], "--otlp": ["http://localhost:4318/v1/traces"],
    "--otlp-content": [], "--notify": ["ntfy://a/t"], "--notify-after": ["5"],
    "--notify-content": [],
}  # fmt: skip


def test_submits_help_offers_no_flag_it_refuses_and_each_is_still_refused_by_name(
    cli: Cli, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        cli("submit", "--help")
    assert exited.value.code == 0
    said = capsys.readouterr().out
    assert "--script" in said and "--max-turns" in said and "--policy" in said
    offered = set(re.findall(r"--[a-z][a-z-]*", said))
    assert offered.isdisjoint(REFUSED_BY_SUBMIT), offered & set(REFUSED_BY_SUBMIT)
    db = tmp_path / "s.db"
    for flag, value in REFUSED_BY_SUBMIT.items():
        code, _, err = cli("submit", "order_support", flag, *value, "--db", str(db))
        refused(code, err, flag)
    code, _, err = cli("submit", "order_support", "--headless", "--db", str(db))
    refused(code, err, "--headless: a submitted run is always headless")
    assert queued(db) == {}


def test_a_fork_past_a_write_its_env_cannot_undo_is_refused(cli: Cli, tmp_path: Path) -> None:
    """service_outage keeps its state in memory and has no restore(snapshot): a fork after
    its first write would go on from the state before it, its log saying the write was done.
    Before that write, the fork starts where the run was."""
    db = tmp_path / "s.db"
    code, done, err = cli("run", "service_outage", "--script", "solve", "--headless", "--json",
                          "--db", str(db))  # fmt: skip
    assert code == 0 and done is not None, err
    run_id = str(done["run_id"])
    code, _, err = cli("fork", run_id, "--at", "c3", "--db", str(db))
    assert code == 2 and f"run {run_id} cannot be forked at c3: its env (ServiceOutage)" in err
    assert "has no restore(snapshot)" in err
    assert queued(db) == {}
    code, _, err = cli("fork", run_id, "--at", "c2", "--db", str(db))
    assert code == 0, err


@pytest.fixture
def marked_mcp_env(tmp_path: Path) -> tuple[Path, Path]:
    """notes_mcp whose server leaves a mark each time it starts, and whose `solve` script's
    first call names a tool the server does not list: the env folder and the mark."""
    env, mark = tmp_path / "marked_mcp", tmp_path / "server-started"
    shutil.copytree(SAMPLES / "notes_mcp", env)
    toml = env / "scenario.toml"
    text = toml.read_text()
    started = 'command = ["{python}", "{envdir}/marked.py"]'
    text = text.replace('command = ["{python}", "{envdir}/server.py"]', started, 1)
    toml.write_text(text.replace('tool = "list_notes"', 'tool = "list_notez"', 1))
    (env / "marked.py").write_text(
        f"import pathlib, runpy\npathlib.Path({str(mark)!r}).touch()\n"
        f"runpy.run_path({str(env / 'server.py')!r}, run_name='__main__')\n"
    )
    return env, mark


def test_submit_starts_no_mcp_server_and_its_worker_refuses_what_submit_could_not_check(
    cli: Cli, marked_mcp_env: tuple[Path, Path], tmp_path: Path
) -> None:
    """A submit checks what it can without the env's server (the scenario, the script's
    steps, the policy, the model): its tools are the worker's to list. The worker that claims
    it starts the server and refuses, by name, the script calling a tool it has not."""
    from worker_helpers import with_a_worker

    from loopdeck.core.events import RunStopped
    from loopdeck.operator.resume import load_log

    env, mark = marked_mcp_env
    db = tmp_path / "s.db"
    code, _, err = cli("submit", str(env), "--script", "nosuch", "--db", str(db))
    refused(code, err, "no script named 'nosuch'")
    code, done, err = cli("submit", str(env), "--approve", "auto", "--db", str(db), "--json")
    assert code == 0 and done is not None, err
    assert not mark.exists()  # no server started where it was submitted
    run_id = str(done["run_id"])

    async def stopped() -> list[Any]:
        store = await open_store(db)
        try:
            log: list[Any] = []

            async def ended() -> bool:
                log[:] = await load_log(store, run_id)
                return bool(log) and isinstance(log[-1], RunStopped)

            await with_a_worker(db, ended)
            return log
        finally:
            await store.close()

    stop = asyncio.run(stopped())[-1]
    assert stop.stop_reason.value == "crashed", stop
    assert "script 'solve'" in stop.detail and "unknown tool 'list_notez'" in stop.detail
    assert mark.exists()  # its worker started it


def test_a_fork_of_an_mcp_run_starts_no_server_and_its_worker_refuses_what_it_shows(
    cli: Cli, marked_mcp_env: tuple[Path, Path], tmp_path: Path
) -> None:
    """Forked past the run's first write, the env's server would start in another state than
    the run saw there (it has no restore): the worker that starts it refuses it, naming why;
    `fork` itself started nothing."""
    from worker_helpers import with_a_worker

    from loopdeck.core.events import RunStopped
    from loopdeck.operator.resume import load_log

    env, mark = marked_mcp_env
    toml = env / "scenario.toml"
    toml.write_text(toml.read_text().replace('tool = "list_notez"', 'tool = "list_notes"', 1))
    db = tmp_path / "s.db"
    code, done, err = cli("run", str(env), "--headless", "--approve", "auto", "--json",
                          "--db", str(db))  # fmt: skip
    assert code == 0 and done is not None, err
    source = str(done["run_id"])
    mark.unlink()
    code, done, err = cli("fork", source, "--at", "c6", "--env", str(env), "--db", str(db),
                          "--json")  # fmt: skip
    assert code == 0 and done is not None, err
    assert not mark.exists()  # no server started where it was forked
    forked = str(done["run_id"])

    async def stopped() -> list[Any]:
        store = await open_store(db)
        try:
            log: list[Any] = []

            async def ended() -> bool:
                log[:] = await load_log(store, forked)
                return bool(log) and isinstance(log[-1], RunStopped)

            await with_a_worker(db, ended)
            return log
        finally:
            await store.close()

    stop = asyncio.run(stopped())[-1]
    assert stop.stop_reason.value == "crashed", stop
    assert "it cannot be forked: its env (McpEnvironment) starts in state" in stop.detail
    assert mark.exists()  # its worker started it
