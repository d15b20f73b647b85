"""MCP servers nobody here wrote (issue 28), each under a scripted agent through loopdeck's
whole CLI: `@modelcontextprotocol/server-filesystem` from npm (through `npx`) and
`mcp-server-git` from PyPI (in a venv of its own: it brings GitPython), each with a write
approved, a write rejected and a loop caught; and the sample server over streamable HTTP.

In `make stress` (CI has the npm registry and PyPI): they fetch packages on first use.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import venv
from pathlib import Path

import pytest
from store_helpers import last_json

pytestmark = pytest.mark.slow
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "loopdeck-tests"
SAMPLE = Path(__file__).resolve().parents[1] / "sample_envs" / "notes_mcp"


def _run(env: Path, script: str, approve: str, db: Path) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-m", "loopdeck", "run", str(env), "--script", script, "--headless",
         "--json", "--approve", approve, "--db", str(db)],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode in (0, 1), done.stderr  # 1: the run ended without its goal
    return dict(last_json(done.stdout))


def _scripts(write: list[str], loop: str) -> str:
    """`solve` (the writes, then a final), `reject` (the same, every write denied) and
    `loop` (one read, repeated)."""
    turns = "".join(f"[[scripts.solve.executor]]\n{w}\n" for w in write)
    denied = "".join(f"[[scripts.reject.executor]]\n{w}\n" for w in write)
    return f"""
[scripts.solve]
expect = {{ stop_reason = "goal_met" }}
{turns}[[scripts.solve.executor]]
final = "done"

[scripts.reject]
expect = {{ stop_reason = "stalled", approve = "deny" }}
{denied}[[scripts.reject.executor]]
final = "could not"

[scripts.loop]
expect = {{ stop_reason = "no_progress" }}
[[scripts.loop.executor]]
{loop}
repeat = true
"""


def _check_all_three(env: Path, db: Path) -> None:
    solved = _run(env, "solve", "auto", db)
    assert solved["stop_reason"] == "goal_met", solved["detail"]
    rejected = _run(env, "reject", "deny", db)
    assert rejected["stop_reason"] == "stalled", rejected["detail"]
    statuses = {c["status"] for c in rejected["calls"]}  # type: ignore[union-attr]
    assert statuses == {"rejected"}
    looped = _run(env, "loop", "auto", db)
    assert looped["stop_reason"] == "no_progress", looped["detail"]


def test_the_npm_filesystem_server(tmp_path: Path) -> None:
    env = tmp_path / "fs_env"
    (env / "workspace").mkdir(parents=True)
    (env / "workspace" / "readme.md").write_text("hello\n", encoding="utf-8")
    check = "import pathlib, sys; p = pathlib.Path('notes.md'); sys.exit(0 if p.exists() and p.read_text() == 'done' else 1)"  # noqa: E501
    write = 'tool = "write_file"\nargs = { path = "{workdir}/notes.md", content = "done" }'
    loop = 'tool = "read_text_file"\nargs = { path = "{workdir}/readme.md" }'
    (env / "scenario.toml").write_text(
        f"""name = "fs"
goal = "Write done into notes.md."
mode = "react"
goal_check = ["{{python}}", "-c", "{check}"]
[budgets]
deadline_s = 240
[mcp]
command = ["npx", "-y", "@modelcontextprotocol/server-filesystem", "{{workdir}}"]
startup_timeout_s = 180
snapshot = [{{ tool = "list_directory_with_sizes", args = {{ path = "{{workdir}}" }} }}]
{_scripts([write], loop)}""",
        encoding="utf-8",
    )
    _check_all_three(env, tmp_path / "s.db")


def _git_server() -> Path:
    """`mcp-server-git` in a venv of its own, made once and kept in the cache."""
    root = CACHE / "mcp-server-git"
    binary = root / "bin" / "mcp-server-git"
    if not binary.exists():
        venv.create(root, with_pip=True)
        subprocess.run(
            [str(root / "bin" / "pip"), "install", "-q", "mcp-server-git>=2026.10"],
            check=True, timeout=600,
        )  # fmt: skip
    return binary


def test_the_pypi_git_server(tmp_path: Path) -> None:
    server = _git_server()
    env = tmp_path / "git_env"
    repo = env / "workspace"
    repo.mkdir(parents=True)
    who = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"}  # fmt: skip
    git = {**os.environ, **who}
    subprocess.run(["git", "init", "-q", str(repo)], check=True, env=git)
    (repo / "notes.md").write_text("draft\n", encoding="utf-8")
    subprocess.run(["git", "-C", str(repo), "add", "."], check=True, env=git)
    subprocess.run(["git", "-C", str(repo), "commit", "-qm", "start"], check=True, env=git)
    (repo / "notes.md").write_text("done\n", encoding="utf-8")  # a change to commit
    check = "import subprocess, sys; out = subprocess.run(['git', 'log', '--format=%s'], capture_output=True, text=True).stdout; sys.exit(0 if 'record notes' in out else 1)"  # noqa: E501
    writes = [
        'tool = "git_add"\nargs = { repo_path = "{workdir}", files = ["notes.md"] }',
        'tool = "git_commit"\nargs = { repo_path = "{workdir}", message = "record notes" }',
    ]
    loop = 'tool = "git_status"\nargs = { repo_path = "{workdir}" }'
    env_table = ", ".join(f'{k} = "{v}"' for k, v in who.items())
    (env / "scenario.toml").write_text(
        f"""name = "git"
goal = "Commit notes.md with the message 'record notes'."
mode = "react"
goal_check = ["{{python}}", "-c", "{check}"]
[budgets]
deadline_s = 240
[mcp]
command = ["{server}", "--repository", "{{workdir}}"]
env = {{ {env_table} }}
startup_timeout_s = 120
snapshot = [{{ tool = "git_status", args = {{ repo_path = "{{workdir}}" }} }},
            {{ tool = "git_log", args = {{ repo_path = "{{workdir}}" }} }}]
{_scripts(writes, loop)}""",
        encoding="utf-8",
    )
    _check_all_three(env, tmp_path / "s.db")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_the_sample_server_over_streamable_http(tmp_path: Path) -> None:
    served = tmp_path / "served"
    served.mkdir()
    (served / "notes.json").write_text('{"draft": "x", "release": "v1.1 shipped"}')
    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, str(SAMPLE / "server.py"), "--http", str(port)],
        cwd=served, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        for _ in range(400):
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.05)
        env = tmp_path / "http_env"
        env.mkdir()
        scenario = (SAMPLE / "scenario.toml").read_text(encoding="utf-8")
        scenario = scenario.replace(
            'command = ["{python}", "{envdir}/server.py"]', f'url = "http://127.0.0.1:{port}/mcp"'
        ).replace('"{envdir}/check_goal.py"', f'"{SAMPLE / "check_goal.py"}"')
        (env / "scenario.toml").write_text(scenario, encoding="utf-8")
        # The goal check runs where the server keeps its notes: the working copy is not it.
        (env / "scenario.toml").write_text(
            scenario.replace(
                "goal_check = [",
                f'goal_check = ["sh", "-c", "cd {served} && exec \\"$0\\" \\"$@\\"", ',
            ),
            encoding="utf-8",
        )
        solved = _run(env, "solve", "auto", tmp_path / "s.db")
        assert solved["stop_reason"] == "goal_met", solved["detail"]
    finally:
        server.terminate()
        server.wait(10)
