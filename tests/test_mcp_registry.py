"""More MCP servers nobody here wrote, each through loopdeck's whole CLI as a user runs it:
`@modelcontextprotocol/server-memory` (a knowledge graph read by a tool), and
`@modelcontextprotocol/server-everything` (the protocol's test server: annotated tools, a
long operation that reports progress, a task-only tool, logging), from npm through `npx`;
`mcp-server-sqlite` (no annotations at all) and `mcp-server-time`, from PyPI, each in a venv
of its own.

In `make stress` (CI has the npm registry and PyPI): they fetch packages on first use, kept
as `test_mcp_interop.py` keeps its own.
"""

from __future__ import annotations

import subprocess
import venv
from pathlib import Path

import pytest
from test_mcp_interop import CACHE, _check_all_three, _run, _scripts

pytestmark = pytest.mark.slow
ENVS = Path(__file__).parent / "envs"


def test_the_npm_memory_server(tmp_path: Path) -> None:
    _check_all_three(ENVS / "mcp_memory", tmp_path / "s.db")


def test_the_npm_everything_server(tmp_path: Path) -> None:
    """Its long operation (4 s, a progress every half second) runs past a 2.5 s timeout to its
    end; its tools are classed by their hints; a write approved, then a loop caught; under
    `deny`, the write rejected and the server's logging never turned on."""
    toured = _run(ENVS / "mcp_everything", "tour", "auto", tmp_path / "s.db")
    assert toured["stop_reason"] == "no_progress", toured["detail"]
    calls = toured["calls"]
    assert isinstance(calls, list)
    asked = [(c["tool"], c["status"], c["decided_by"] is not None) for c in calls]
    assert asked == [  # a write is asked for (here decided by `--approve auto`); a read is not
        ("trigger-long-running-operation", "executed", False),
        ("toggle-simulated-logging", "executed", True),
        ("echo", "executed", False),
        ("echo", "blocked_repeat", False),
    ]
    assert calls[0]["retries"] == 0
    denied = _run(ENVS / "mcp_everything", "tour", "deny", tmp_path / "s.db")
    assert [c["status"] for c in denied["calls"]][:2] == ["executed", "rejected"]  # type: ignore[index]


def _pypi_server(name: str, *pins: str) -> Path:
    """`name` from PyPI in a venv of its own, made once and kept in the cache."""
    root = CACHE / name
    binary = root / "bin" / name
    if not binary.exists():
        venv.create(root, with_pip=True)
        subprocess.run(
            [str(root / "bin" / "pip"), "install", "-q", name, *pins], check=True, timeout=600
        )
    return binary


def test_the_pypi_sqlite_server(tmp_path: Path) -> None:
    """No tool of its carries an annotation: each is a write, asked for, but the one the
    scenario says only reads (its state's entry)."""
    server = _pypi_server("mcp-server-sqlite", "mcp<2")  # it is written for the SDK's 1.x
    env = tmp_path / "sqlite_env"
    (env / "workspace").mkdir(parents=True)
    check = "import sqlite3, sys; rows = sqlite3.connect('t.db').execute('select * from releases').fetchall(); sys.exit(0 if ('v1.2', 'shipped') in rows else 1)"  # noqa: E501
    writes = [
        'tool = "create_table"\nargs = { query = "create table releases (version text, status text)" }',  # noqa: E501
        "tool = \"write_query\"\nargs = { query = \"insert into releases values ('v1.2', 'shipped')\" }",  # noqa: E501
    ]
    loop = 'tool = "read_query"\nargs = { query = "select 1" }'
    (env / "scenario.toml").write_text(
        f"""name = "sqlite"
goal = "A row ('v1.2', 'shipped') in the table releases."
mode = "react"
goal_check = ["{{python}}", "-c", "{check}"]
[budgets]
deadline_s = 240
[mcp]
command = ["{server}", "--db-path", "{{workdir}}/t.db"]
startup_timeout_s = 120
snapshot = [{{ tool = "read_query", args = {{ query = "select * from sqlite_master" }} }}]
[mcp.tools.read_query]
risk = "read"
{_scripts(writes, loop)}""",
        encoding="utf-8",
    )
    _check_all_three(env, tmp_path / "s.db")
    looped = _run(env, "loop", "auto", tmp_path / "s.db")["calls"]
    assert [c["decided_by"] for c in looped] == [None, None]  # type: ignore[union-attr]


def test_the_pypi_time_server_loop_is_caught(tmp_path: Path) -> None:
    """Each answer differs (the time), the state does not: the same call is a loop."""
    server = _pypi_server("mcp-server-time")
    env = tmp_path / "time_env"
    (env / "workspace").mkdir(parents=True)
    (env / "scenario.toml").write_text(
        f"""name = "time"
goal = "Say the time in Tokyo."
mode = "react"
goal_check = ["{{python}}", "-c", "import sys; sys.exit(1)"]
[budgets]
deadline_s = 240
[mcp]
command = ["{server}"]
startup_timeout_s = 120
snapshot = "none"
[scripts.loop]
[[scripts.loop.executor]]
tool = "get_current_time"
args = {{ timezone = "Asia/Tokyo" }}
repeat = true
""",
        encoding="utf-8",
    )
    looped = _run(env, "loop", "auto", tmp_path / "s.db")
    assert looped["stop_reason"] == "no_progress", looped["detail"]
