"""What the tests that drive real ACP agents from npm share (Gemini CLI, opencode, Codex: the
`test_acp_gemini_cli.py`, `test_acp_opencode.py` and `test_acp_codex.py` modules): the real CLI
run in a subprocess, the run's events read back with `loopdeck export`, the agent's processes
found by the scratch HOME it was started with, and the ACP messages the agent exchanged with
loopdeck read from the relay's trace (`acp_trace.py`) and said in a failure's message.

Each agent's env folder (`envs/calc_gemini`, `envs/calc_opencode`, `envs/calc_codex`) names its
agent through the relay, and takes what changes per test from loopdeck's environment in its
`[agent] env` table: the loopback model server's URL (`LOOPDECK_TEST_MODEL_URL`), the scratch
HOME (`LOOPDECK_TEST_AGENT_HOME`), the trace file (`LOOPDECK_TEST_ACP_TRACE`) and npm's cache
(`LOOPDECK_TEST_NPM_CACHE`: the user's, so a package is fetched once).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from acp_trace import read_trace

TESTS = Path(__file__).parent
ENVS = TESTS / "envs"
RUN_TIMEOUT_S = 300  # a cold npm cache fetches the package first
WAIT_S = 120.0  # a guard against a hang while an agent starts, never a timing

NEEDS_NPX = pytest.mark.skipif(
    shutil.which("npx") is None or shutil.which("node") is None,
    reason="node/npx not installed: the real agent comes from npm",
)


def npm_cache() -> str:
    done = subprocess.run(
        ["npm", "config", "get", "cache"], capture_output=True, text=True, timeout=60, check=False
    )
    return done.stdout.strip() or str(Path.home() / ".npm")


@dataclass
class Scratch:
    """One test's scratch: the agent's HOME, the ACP trace, the store, and what loopdeck's
    environment tells the env folder's `[agent] env`."""

    root: Path
    url: str
    home: Path = field(init=False)
    trace: Path = field(init=False)
    db: Path = field(init=False)

    def __post_init__(self) -> None:
        self.home = self.root / "home"
        self.home.mkdir(parents=True, exist_ok=True)
        self.trace = self.root / "acp-trace.jsonl"
        self.db = self.root / "loopdeck.db"

    def environ(self) -> dict[str, str]:
        return {
            **os.environ,
            "LOOPDECK_TEST_MODEL_URL": self.url,
            "LOOPDECK_TEST_AGENT_HOME": str(self.home),
            "LOOPDECK_TEST_ACP_TRACE": str(self.trace),
            "LOOPDECK_TEST_NPM_CACHE": npm_cache(),
        }

    def messages(self) -> list[dict[str, Any]]:
        return read_trace(self.trace)


def loopdeck(
    *args: str, environ: dict[str, str] | None = None, timeout: float = RUN_TIMEOUT_S
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "loopdeck", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env=environ,
    )


def last_json(text: str) -> dict[str, Any]:
    lines = [line for line in text.splitlines() if line.strip()]
    assert lines, "loopdeck printed nothing on stdout"
    return dict(json.loads(lines[-1]))


def run_headless(env: Path, scratch: Scratch, approve: str, *extra: str) -> dict[str, Any]:
    """`loopdeck run ENV --headless --json --approve APPROVE`, its outcome's JSON."""
    done = loopdeck(
        "run", str(env), "--headless", "--json", "--approve", approve, "--db", str(scratch.db),
        *extra, environ=scratch.environ(),
    )  # fmt: skip
    assert done.stdout.strip(), done.stderr
    return last_json(done.stdout)


def events(run_id: str, db: Path) -> list[dict[str, Any]]:
    done = loopdeck("export", run_id, "--db", str(db), timeout=60)
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines() if line.strip()]


def kinds(found: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [e for e in found if e["kind"] == kind]


def statuses(found: list[dict[str, Any]]) -> dict[str, str]:
    return {e["call_id"]: e["status"] for e in kinds(found, "tool_finished")}


# -- the agent's processes ----------------------------------------------------------------------
def agent_processes(home: Path) -> list[int]:
    """Live processes started with the scratch HOME: the relay, npx, node, the agent's binary,
    what its shell started (a `setsid` daemon included: it keeps the environment)."""
    marker = f"HOME={home}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        if marker in environ and ") Z" not in stat:
            found.append(int(entry.name))
    return found


def command_of(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
    except OSError:
        return "(gone)"


def processes_said(pids: list[int]) -> str:
    return "; ".join(f"{pid}: {command_of(pid)}" for pid in pids) or "none"


def end_survivors(home: Path) -> None:
    """At a test's end: what the agent left behind, killed by pid (the test's own processes)."""
    for pid in agent_processes(home):
        with suppress(OSError):
            os.kill(pid, signal.SIGKILL)


def wait_until(what: str, condition: Callable[[], Any], timeout: float = WAIT_S) -> Any:
    end = time.monotonic() + timeout
    while not (found := condition()):
        assert time.monotonic() < end, f"not within {timeout:g} s: {what}"
        time.sleep(0.1)
    return found


# -- a run in the background ----------------------------------------------------------------------
class Runner:
    """`loopdeck run ... --headless --json` in a subprocess, its stderr in a file."""

    def __init__(self, env: Path, scratch: Scratch, approve: str, *extra: str) -> None:
        self.scratch = scratch
        self.errfile = scratch.root / "run.err"
        command = [
            sys.executable, "-m", "loopdeck", "run", str(env), "--headless", "--json",
            "--approve", approve, "--db", str(scratch.db), *extra,
        ]  # fmt: skip
        with self.errfile.open("w") as err:
            self.proc = subprocess.Popen(
                command, stdout=subprocess.PIPE, stderr=err, text=True, env=scratch.environ()
            )

    def stderr(self) -> str:
        return self.errfile.read_text() if self.errfile.exists() else ""

    def run_id(self) -> str:
        def said() -> str | None:
            found = re.search(r"run ([0-9a-f]+) started", self.stderr())
            assert found or self.proc.poll() is None, self.stderr()
            return found.group(1) if found else None

        return str(wait_until("the run's start", said, RUN_TIMEOUT_S))

    def alive(self) -> bool:
        return self.proc.poll() is None

    def outcome(self, timeout: float = RUN_TIMEOUT_S) -> dict[str, Any]:
        stdout, _ = self.proc.communicate(timeout=timeout)
        assert stdout.strip(), self.stderr()
        return last_json(stdout)

    def end(self) -> None:
        """A run still going at the test's end (it failed) is interrupted, so loopdeck ends
        its agent and removes its working copy; killed if it does not end in time."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@contextmanager
def running(env: Path, scratch: Scratch, approve: str, *extra: str) -> Iterator[Runner]:
    runner = Runner(env, scratch, approve, *extra)
    try:
        yield runner
    finally:
        runner.end()
        end_survivors(scratch.home)


def pending_call(scratch: Scratch, run_id: str, runner: Runner) -> dict[str, Any]:
    """The first write of the run waiting for approval, once there is one."""

    def first() -> dict[str, Any] | None:
        assert runner.alive(), runner.stderr()
        done = loopdeck("pending", "--json", "--db", str(scratch.db), timeout=60)
        if done.returncode != 0 or not done.stdout.strip():
            return None
        waiting = [p for p in last_json_list(done.stdout) if p.get("run_id") == run_id]
        return waiting[0] if waiting else None

    return dict(wait_until("a write waiting for approval", first, RUN_TIMEOUT_S))


def last_json_list(text: str) -> list[dict[str, Any]]:
    lines = [line for line in text.splitlines() if line.strip()]
    found = json.loads(lines[-1]) if lines else []
    return list(found) if isinstance(found, list) else []


# -- what the agent said, for a failure's message -------------------------------------------------
SHOWN = ("tool_call", "tool_call_update", "usage_update", "plan")


def acp_said(scratch: Scratch, limit: int = 6000) -> str:
    """The ACP messages that matter to loopdeck's calls, one a line: the agent's tool calls
    and their updates (status, title, kind, rawInput, locations, diffs' paths), its permission
    requests (the call and the option kinds), loopdeck's answers, fs and terminal requests, and
    its usage."""
    lines = []
    for entry in scratch.messages():
        msg, way = entry["msg"], "<-" if entry["dir"] == "from_agent" else "->"
        method = msg.get("method", "")
        params = msg.get("params") or {}
        if method == "session/update":
            update = params.get("update") or {}
            if update.get("sessionUpdate") not in SHOWN:
                continue
            lines.append(f"{way} {json.dumps(_short(update))}")
        elif method in ("session/request_permission",) or method.startswith(("fs/", "terminal/")):
            lines.append(f"{way} {method} {json.dumps(_short(params))}")
        elif method in ("session/prompt", "session/cancel", "session/set_mode"):
            lines.append(f"{way} {method}")
        elif "method" not in msg and isinstance(msg.get("result"), dict):
            result = msg["result"]
            if "outcome" in result or "stopReason" in result:
                lines.append(f"{way} result {json.dumps(_short(result))}")
        elif "error" in msg:
            lines.append(f"{way} error {json.dumps(msg['error'])[:300]}")
    text = "\n".join(lines)
    return text if len(text) <= limit else text[: limit // 2] + "\n…\n" + text[-limit // 2 :]


def _short(value: Any, width: int = 160) -> Any:
    if isinstance(value, dict):
        return {k: _short(v, width) for k, v in value.items() if k != "sessionId"}
    if isinstance(value, list):
        return [_short(v, width) for v in value]
    if isinstance(value, str) and len(value) > width:
        return value[: width - 1] + "…"
    return value


def agent_updates(scratch: Scratch, kind: str) -> list[dict[str, Any]]:
    found = []
    for entry in scratch.messages():
        msg = entry["msg"]
        if entry["dir"] == "from_agent" and msg.get("method") == "session/update":
            update = (msg.get("params") or {}).get("update") or {}
            if update.get("sessionUpdate") == kind:
                found.append(update)
    return found


def agent_requests(scratch: Scratch, method: str) -> list[dict[str, Any]]:
    return [
        entry["msg"].get("params") or {}
        for entry in scratch.messages()
        if entry["dir"] == "from_agent" and entry["msg"].get("method") == method
    ]


def said(scratch: Scratch, api: Any, outcome: dict[str, Any] | None = None) -> str:
    """What to read when an assertion fails: the outcome, what the agent sent over ACP and
    what the loopback model server refused."""
    shown = {k: (outcome or {}).get(k) for k in ("stop_reason", "detail", "calls")}
    head = json.dumps(shown)[:3000]
    return f"\noutcome: {head}\nACP:\n{acp_said(scratch)}\nrefused: {api.problems()}"


def permission_answers(scratch: Scratch) -> list[str | None]:
    """The option loopdeck chose for each permission request, in order (None: cancelled)."""
    trace = scratch.messages()
    asked = [
        e["msg"]["id"]
        for e in trace
        if e["dir"] == "from_agent" and e["msg"].get("method") == "session/request_permission"
    ]
    chosen: dict[Any, str | None] = {}
    for e in trace:
        msg = e["msg"]
        if e["dir"] == "to_agent" and "method" not in msg and msg.get("id") in asked:
            outcome = (msg.get("result") or {}).get("outcome") or {}
            chosen[msg["id"]] = outcome.get("optionId")
    return [chosen.get(i) for i in asked]


def daemons(home: Path, marker: str) -> list[int]:
    return [pid for pid in agent_processes(home) if marker in command_of(pid)]


GONE_S = 10.0  # a process in the middle of its exit when the run returns may take a moment


def gone_or_left(home: Path) -> list[int]:
    """The agent's processes still alive once they had `GONE_S` to finish exiting after the
    run ended (empty: none left)."""
    end = time.monotonic() + GONE_S
    while (left := agent_processes(home)) and time.monotonic() < end:
        time.sleep(0.05)
    return left
