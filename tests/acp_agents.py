"""What the tests that drive real ACP agents from npm share (Gemini CLI, opencode, Codex: the
`test_acp_gemini_cli.py`, `test_acp_opencode.py` and `test_acp_codex.py` modules): the real CLI
run in a subprocess, the run's events read back with `loopdeck export`, the agent's processes
found by the scratch HOME it was started with, and the ACP messages the agent exchanged with
loopdeck read from the relay's trace (`acp_trace.py`) and said in a failure's message; and the
cases every one of them plays (an approved edit, a denied one, two keys, one key, an edit of the
agent's own call, a write it never asked for, a stop), checked here for what all must show.
`test_acp_real_agent.py` (Claude Code) takes the CLI's run and export and the agent's processes.

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
from functools import cached_property
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


def run_headless(
    env: Path, db: Path, approve: str, *extra: str, environ: dict[str, str] | None = None
) -> dict[str, Any]:
    """`loopdeck run ENV --headless --json --approve APPROVE --db DB`, its outcome's JSON."""
    done = loopdeck(
        "run", str(env), "--headless", "--json", "--approve", approve, "--db", str(db), *extra,
        environ=environ,
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
        listed = last_json_list(done.stdout)
        waiting = [p for p in listed if p.get("run_id") == run_id and p.get("kind") == "write"]
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


# -- what every agent's tests check ------------------------------------------------------------
# Each agent's module plays the same cases with its own script and its own tools; what the runs
# must show in common is checked here, what each agent shows on its own stays in its module.
STOPS = pytest.mark.parametrize(
    ("how", "stop_reason"), [("cancel", "cancelled"), ("cancel --now", "killed")]
)


@dataclass
class Played:
    """A run of the agent against its loopback model, ended: its outcome, what to read when
    an assertion fails (`why`) and its events (exported when first read)."""

    scratch: Scratch
    api: Any
    outcome: dict[str, Any]
    why: str = field(init=False)

    def __post_init__(self) -> None:
        self.why = said(self.scratch, self.api, self.outcome)

    @cached_property
    def found(self) -> list[dict[str, Any]]:
        return events(self.outcome["run_id"], self.scratch.db)

    def left(self) -> list[int]:
        return agent_processes(self.scratch.home)


def play(env: Path, tmp_path: Path, api: Any, approve: str, *extra: str) -> Played:
    """`loopdeck run ENV --headless --json` while `api` (a loopback model server, not yet
    entered) plays its script."""
    with api:
        scratch = Scratch(tmp_path, api.url)
        environ = scratch.environ()
        outcome = run_headless(env, scratch.db, approve, *extra, environ=environ)
    return Played(scratch, api, outcome)


def approved_edit_landed(run: Played) -> dict[str, Any]:
    """An edit approved under `auto`: the goal met, the approval decided for its own call,
    the call executed, the goal check's verdict a pass on a changed tree, no change unasked and
    no process of the agent left. Its `approval_requested`, for what each agent shows in it."""
    why, found = run.why, run.found
    assert run.outcome["stop_reason"] == "goal_met", why
    assert run.api.problems() == [], why
    [asked] = kinds(found, "approval_requested")
    [decided] = kinds(found, "approval_decided")
    assert decided["call_id"] == asked["call_id"] and decided["approved"] is True
    assert statuses(found)[asked["call_id"]] == "executed", why
    [verdict] = kinds(found, "review_verdict")
    assert verdict["verdict"] == "pass" and verdict["before_hash"] != verdict["after_hash"]
    assert kinds(found, "unrequested_change") == [], why
    assert run.left() == []
    return asked


def denied_edit_stalled(run: Played, reject: str) -> None:
    """An edit denied: the round stalled, the call rejected and the tree unchanged (the goal
    check says why the goal is unmet), the agent answered with its option `reject`, no process
    of the agent left."""
    why = run.why
    assert run.outcome["stop_reason"] == "stalled", why
    assert run.api.problems() == [], why
    [decided] = kinds(run.found, "approval_decided")
    assert decided["approved"] is False
    assert statuses(run.found)[decided["call_id"]] == "rejected", why
    [verdict] = kinds(run.found, "review_verdict")
    assert verdict["before_hash"] == verdict["after_hash"], why
    assert any("calc.add(2, 3) is -1" in line for line in run.outcome["findings"]), why
    assert permission_answers(run.scratch) == [reject], why
    assert run.left() == []


def two_keys(run: Played, tool: str, status: str | None = None) -> list[dict[str, Any]]:
    """Two different calls whose tool starts with `tool`, from one state: two fingerprints,
    the guard silent, both ending `status` (when given). The two `call_proposed`."""
    why = run.why
    assert run.api.problems() == [], why
    proposed = [e for e in kinds(run.found, "call_proposed") if e["tool"].startswith(tool)]
    assert len(proposed) == 2, why
    assert proposed[0]["state_hash"] == proposed[1]["state_hash"], why
    assert proposed[0]["fingerprint"] != proposed[1]["fingerprint"], why
    assert kinds(run.found, "guard_tripped") == [], why
    if status is not None:
        assert [statuses(run.found)[e["call_id"]] for e in proposed] == [status, status], why
    return proposed


def one_key(run: Played) -> list[dict[str, Any]]:
    """Two identical reads from one state: one fingerprint, the second caught as a repeat,
    the run stopped `no_progress`, no process of the agent left. The agents read without
    asking: the second read runs before loopdeck hears of it, and is recorded as run (or as
    interrupted, its turn cancelled before it said it completed), never as blocked. The two
    reads' `call_proposed`."""
    why = run.why
    assert run.api.problems() == [], why
    reads = [e for e in kinds(run.found, "call_proposed") if e["tool"].startswith("read:")]
    assert len(reads) == 2, why
    assert reads[0]["fingerprint"] == reads[1]["fingerprint"], why
    [tripped] = kinds(run.found, "guard_tripped")
    assert tripped["call_id"] == reads[1]["call_id"], why
    # run (the agent reports it completed), or, when the run's stop cancels the turn before
    # the agent says so, interrupted as it ran (never skipped: the agent said it was running)
    assert statuses(run.found).get(reads[1]["call_id"]) in ("executed", "interrupted"), why
    assert run.outcome["stop_reason"] == "no_progress", why
    assert run.left() == []
    return reads


def own_call_edit_refused(env: Path, tmp_path: Path, api: Any, edit: dict[str, Any]) -> Played:
    """`loopdeck approve --args EDIT` on the first permission the agent asks, under `wait`:
    the agent runs its own input, so the edit is refused (exit non-zero, saying so) and nothing
    is decided; a plain rejection then goes through, and the round stalls."""
    with api:
        scratch = Scratch(tmp_path, api.url)
        db = ("--db", str(scratch.db))
        with running(env, scratch, "wait") as runner:
            run_id = runner.run_id()
            call = pending_call(scratch, run_id, runner)["call_id"]
            refused = loopdeck("approve", run_id, call, "--args", json.dumps(edit), *db)
            still = loopdeck("pending", "--json", *db)
            rejected = loopdeck("reject", run_id, call, "--reason", "not now", *db)
            outcome = runner.outcome()
    run = Played(scratch, api, outcome)
    why = run.why + f"\napprove --args said: {refused.stderr}{refused.stdout}"
    assert refused.returncode != 0, why
    assert "runs its own input" in refused.stderr, why
    assert call in [p["call_id"] for p in json.loads(still.stdout)], why
    assert rejected.returncode == 0, rejected.stderr
    [decided] = kinds(run.found, "approval_decided")
    assert decided["approved"] is False and decided.get("args") is None, why
    assert outcome["stop_reason"] == "stalled", why
    assert run.left() == []
    return run


def unasked_write_stopped(run: Played) -> None:
    """A write to calc.py the agent made without asking (so nothing approved it) stops a
    denying run `policy_block` naming the file; no process of the agent left."""
    why = run.why
    assert run.api.problems() == [], why
    assert agent_requests(run.scratch, "session/request_permission") == [], why
    assert run.outcome["stop_reason"] == "policy_block", why
    assert "calc.py" in run.outcome["detail"], why
    [unrequested] = kinds(run.found, "unrequested_change")
    assert unrequested["changed"] == ["calc.py"] and unrequested["stops"] is True, why
    assert run.left() == []


def stop_leaves_no_process(
    env: Path,
    tmp_path: Path,
    api: Any,
    how: str,
    stop_reason: str,
    daemon: str,
    *extra: str,
    told: Callable[[Any], str] = lambda _: "",
) -> None:
    """The agent's shell starts a daemon in a session of its own (its command line shows
    `daemon`), then its model never answers; `loopdeck HOW` stops the run (`stop_reason`), and
    no process of the agent is left. `told`: what its model was told, for a failure's message."""
    api.hang_from = 1
    with api:
        scratch = Scratch(tmp_path, api.url)
        with running(env, scratch, "auto", *extra) as runner:
            run_id = runner.run_id()
            wait_until("the model asked after the shell", lambda: api.hanging.is_set() or None)
            seen = processes_said(agent_processes(scratch.home))
            assert daemons(scratch.home, daemon), (
                f"the shell started no daemon (agent: {seen}{told(api)})" + said(scratch, api)
            )
            done = loopdeck(*how.split(), run_id, "--db", str(scratch.db), timeout=60)
            assert done.returncode == 0, done.stderr
            outcome = runner.outcome(timeout=RUN_TIMEOUT_S)
            left = gone_or_left(scratch.home)
    why = said(scratch, api, outcome) + f"\nleft: {processes_said(left)}"
    assert outcome["stop_reason"] == stop_reason, why
    assert left == [], why
    end_survivors(scratch.home)
