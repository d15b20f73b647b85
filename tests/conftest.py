from __future__ import annotations

import gc
import json
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from loopdeck.cli import main
from loopdeck.core.approvals import Approver
from loopdeck.core.events import EventBase, EventBus
from loopdeck.core.outcome import RunOutcome
from loopdeck.operator.launch import PreparedRun, RunOptions, prepare_run

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "sample_envs"
HARNESS = Path(__file__).parent / "envs" / "harness"
EDGES = Path(__file__).parent / "envs" / "edges"


class Recorder:
    def __init__(self) -> None:
        self.events: list[EventBase] = []

    def __call__(self, event: EventBase) -> None:
        self.events.append(event)

    def kinds(self, kind: str) -> list[Any]:
        return [e for e in self.events if getattr(e, "kind", None) == kind]


def prepare(
    env: str | Path,
    script: str,
    *,
    approver: Approver | None = None,
    approve: str = "auto",
    mode: str | None = None,
    **budget: Any,
) -> tuple[PreparedRun, Recorder]:
    bus = EventBus()
    recorder = Recorder()
    bus.subscribe(recorder)
    options = RunOptions(
        env=str(env),
        script=script,
        mode=mode,  # type: ignore[arg-type]
        approve=approve,  # type: ignore[arg-type]
        budget_overrides=budget,
    )
    return prepare_run(options, approver=approver, bus=bus), recorder


async def run_env(
    env: str | Path,
    script: str,
    *,
    on_event: Callable[[PreparedRun, EventBase], None] | None = None,
    **kwargs: Any,
) -> tuple[RunOutcome, Recorder]:
    prepared, recorder = prepare(env, script, **kwargs)
    if on_event is not None:
        prepared.runtime.bus.subscribe(lambda event: on_event(prepared, event))
    try:
        outcome = await prepared.runtime.run()
    finally:
        prepared.cleanup()
    return outcome, recorder


@pytest.fixture(autouse=True)
def _private_store(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> Path:
    """Every test records to its own store, never to the user's."""
    path = tmp_path_factory.mktemp("store") / "loopdeck.db"
    monkeypatch.setenv("LOOPDECK_DB", str(path))
    # The user data dir (where spill files go) is the test's own as well.
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path_factory.mktemp("data")))
    # So is the log folder (a console that fails writes its traceback there).
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path_factory.mktemp("state")))
    # A developer's own policy (the user config folder's) never decides a test's calls.
    monkeypatch.setenv("LOOPDECK_USER_POLICY", "none")
    # Nor do a developer's own channels get a test's pushes (`notify` in config.toml).
    monkeypatch.setenv("LOOPDECK_CONFIG", "none")
    monkeypatch.delenv("LOOPDECK_NOTIFY", raising=False)
    return path


@pytest.fixture(autouse=True)
def _recursion_limit() -> Iterator[None]:
    """A test leaves the interpreter's recursion limit as it found it: how deep a JSON reply
    is parsed before it is refused depends on it, and a test's outcome must not depend on
    which tests ran before it in its process (xdist's worker). CEL's parser raises it when
    built; `loopdeck/policy/expressions.py` puts it back (`test_policy_leaves_the_limit`)."""
    limit = sys.getrecursionlimit()
    yield
    sys.setrecursionlimit(limit)


@pytest.fixture
def cli(
    capsys: pytest.CaptureFixture[str],
) -> Callable[..., tuple[int, dict[str, Any] | None, str]]:
    """Run `loopdeck` in-process; returns (exit code, last-line JSON or None, stderr)."""

    def invoke(*argv: str) -> tuple[int, dict[str, Any] | None, str]:
        code = main(list(argv))
        out, err = capsys.readouterr()
        lines = [line for line in out.splitlines() if line.strip()]
        payload = None
        if lines and lines[-1].startswith(("{", "[")):
            payload = json.loads(lines[-1])
        return code, payload, err

    return invoke


@pytest.fixture
def solved_run(cli: Callable[..., Any], tmp_path: Path) -> tuple[Path, str]:
    """A sample run (order_support `solve`) recorded as `loopdeck run` records it, its
    model's replies kept: its store and its id."""
    db = tmp_path / "s.db"
    code, done, err = cli("run", "order_support", "--script", "solve", "--headless", "--json",
                          "--db", str(db))  # fmt: skip
    assert code == 0 and done is not None, err
    return db, str(done["run_id"])


# -- the two store backends ------------------------------------------------------------------
_cluster: Any = None
_databases = iter(range(1, 10**6))


def pg_cluster() -> Any:
    """The session's throwaway PostgreSQL cluster, started on first use. In CI a cluster that
    cannot start fails the test: the PostgreSQL tests must run there."""
    global _cluster
    from pg_cluster import Cluster, ClusterUnavailable

    if _cluster is None:
        try:
            _cluster = Cluster().start()
        except ClusterUnavailable as exc:
            if os.environ.get("CI"):
                pytest.fail(f"PostgreSQL cluster unavailable in CI: {exc}")
            pytest.skip(f"PostgreSQL cluster unavailable: {exc}")
    return _cluster


def fresh_pg_database(monkeypatch: pytest.MonkeyPatch) -> str:
    """A new empty database in the session's cluster; its URL carries no password (PGPASSWORD
    in the environment does, as for any libpq program)."""
    import psycopg

    cluster = pg_cluster()
    name = f"t{next(_databases)}_{os.getpid()}"
    with psycopg.connect(cluster.url, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    monkeypatch.setenv("PGPASSWORD", cluster.password)
    return f"postgresql://{cluster.user}@127.0.0.1:{cluster.port}/{name}"


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if _cluster is not None:
        _cluster.stop()


# The PostgreSQL variants of the store's behaviour tests run in `make stress` (CI runs it too),
# keeping `make test` near its time budget; tests/test_postgres_store.py runs in both.
@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.slow)])
def db(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """Where a test's store is: a SQLite file, or a fresh PostgreSQL database."""
    if request.param == "sqlite":
        return tmp_path / "s.db"
    return fresh_pg_database(monkeypatch)


# The collector, in a test worker. Importing the test modules (LiteLLM, pydantic, Textual, the
# product) ran ~21 full collections a worker, each walking everything imported so far: ~7 s of
# each worker's CPU before its first test (a `gc.callbacks` probe, 4 workers). The imports are
# collected nothing while they run, then moved out of the collector's sight, as the console's
# tuning does; what each test leaves alive is moved there once it is torn down, so a later
# test's full collection (and pytest's five at the worker's end) walks only its own objects.
# Cyclic garbage a test left is kept, not collected: a worker lives a few minutes.
def pytest_collection(session: pytest.Session) -> None:
    gc.disable()


def pytest_collection_finish(session: pytest.Session) -> None:
    gc.freeze()
    gc.enable()


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    gc.freeze()


# A clean clone's workers each assert-rewrote every test module at collection, none finding
# another's cache (3.4 s of a worker's 7.6 s of CPU before its first test). With bytecode
# written (`make test` clears PYTHONDONTWRITEBYTECODE), the controller writes pytest's cache of
# them once, before it starts the workers (4.4 s of CPU): a clean clone's six workers through
# collection, 56 -> 42 s of CPU. A module cached already is left; a failure costs time, never
# a result (the workers rewrite what is not cached, as before).
@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    config = session.config
    if sys.dont_write_bytecode or hasattr(config, "workerinput"):
        return
    if not config.getoption("numprocesses", None):
        return  # one process: its own imports write the cache as they go
    try:
        _rewrite_ahead(config)
    except Exception:  # pytest's internals moved: the workers rewrite, as they did
        return


def _rewrite_ahead(config: pytest.Config) -> None:
    from _pytest.assertion.rewrite import (
        PYC_TAIL,
        _rewrite_test,
        _write_pyc,
        assertstate_key,
        get_cache_dir,
    )

    state = config.stash.get(assertstate_key, None)
    if state is None:  # --assert=plain: nothing is rewritten
        return
    for source in sorted(Path(__file__).parent.glob("test_*.py")):
        pyc = get_cache_dir(source) / (source.name[: -len(".py")] + PYC_TAIL)
        if pyc.exists() and pyc.stat().st_mtime >= source.stat().st_mtime:
            continue  # the workers check it against the source, as for any cached module
        stat, code = _rewrite_test(source, config)
        pyc.parent.mkdir(exist_ok=True)
        _write_pyc(state, code, stat, pyc)


# The files that took longest in a quiet `make test` (their tests' --durations summed: 18 s
# down to 9 s), started first. pytest-xdist hands a worker a whole file at a time, in the
# order collected: test_workers.py (17 s), second to last by name, could leave one worker
# running alone at the end while the others idled. An ordering hint only: a file not listed
# keeps its place after these, and a list gone stale costs time, never a result.
LONGEST_FIRST = (
    "test_mcp_server_asks.py", "test_workers.py", "test_keys_screen.py", "test_console.py",
    "test_mcp_state_failures.py", "test_gateway_folder_guarantees.py",
    "test_console_decisions.py", "test_console_evidence.py", "test_mcp_edges.py",
    "test_console_snapshots.py", "test_console_messages.py", "test_question_dialogs.py",
    "test_check_says_why.py", "test_store.py", "test_keys_in_view.py", "test_decisions_kept.py",
    "test_gateway_decisions.py", "test_gateway_stops.py", "test_gateway_undecided.py",
)  # fmt: skip


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {name: place for place, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))
