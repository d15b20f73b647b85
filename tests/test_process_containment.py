"""Issue 36 item 7: no process a run starts outlives it, a daemon in a session of its own
included (`setsid` after a fork, then a second fork: neither the command's process group nor
its parent any more). The guardian is a child subreaper (and, where cgroup v2 is writable,
puts the command in a cgroup of its own): whatever leaves the command's group stays below it,
and is ended when the command exits, when the guardian is stopped, and when its runner dies.
Each test waits on a condition, bounded, and kills any survivor at its end."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from daemonize import MARK
from process_helpers import live_processes
from store_helpers import last_json

from loopdeck.acp_env.terminals import Terminals
from loopdeck.core.states import StopReason
from loopdeck.operator.launch import AcpTarget, RunOptions, prepare_run
from loopdeck.workdir.guardian import CGROUP_PREFIX, cgroup_of

TESTS = Path(__file__).parent
DAEMONIZE = str(TESTS / "daemonize.py")
GUARDIAN = [sys.executable, "-m", "loopdeck.workdir.guardian"]
WAIT_S = 30.0  # a guard against a hang, never a timing


def alive(pid: int) -> bool:
    """The test's daemon still runs (not a zombie; the pid not taken by another process)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return ") Z" not in stat and MARK.encode() in cmdline


def wait_until(what: str, condition: Callable[[], Any], timeout: float = WAIT_S) -> Any:
    end = time.monotonic() + timeout
    while not (found := condition()):
        assert time.monotonic() < end, f"not within {timeout:g} s: {what}"
        time.sleep(0.02)
    return found


def daemon_pid(pidfile: Path, starter: subprocess.Popen[Any] | None = None) -> int:
    """The daemon's pid, once its starter wrote it (failing at once if the starter ended)."""

    def written() -> int | None:
        if pidfile.exists():
            return int(pidfile.read_text())
        if starter is not None and starter.poll() is not None:
            out, err = starter.communicate()
            raise AssertionError(f"ended ({starter.returncode}) before its daemon: {out}{err}")
        return None

    pid: int = wait_until(f"a daemon's pid in {pidfile}", written)
    assert alive(pid)
    return pid


def wait_gone(pid: int, after: str) -> None:
    wait_until(f"the daemon {pid} is gone after {after}", lambda: not alive(pid))


@contextlib.contextmanager
def no_survivor(folder: Path) -> Iterator[None]:
    """Kill, at the end, every process whose command line names the test's folder (a daemon,
    an agent, a command): a failure leaves nothing behind."""
    try:
        yield
    finally:
        for pid in live_processes(str(folder) + os.sep, besides="\0"):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)


# The guardian as the runner starts it, and with cgroups out of its reach: the subreaper alone.
NO_CGROUP = (
    "import sys\nfrom loopdeck.workdir import guardian\n"
    "guardian.made_cgroup = lambda: None\nsys.exit(guardian.main(sys.argv[1:]))"
)
OWN_CGROUP = cgroup_of(os.getpid())
CGROUPS = OWN_CGROUP is not None and os.access(os.path.dirname(OWN_CGROUP), os.W_OK)


@pytest.fixture(params=["cgroup", "subreaper"])
def guardian(request: pytest.FixtureRequest) -> list[str]:
    if request.param == "subreaper":
        return [sys.executable, "-c", NO_CGROUP]
    if not CGROUPS:
        pytest.skip("cgroup v2 is not writable here: the guardian is a subreaper alone")
    return GUARDIAN


def in_its_cgroup(guardian: list[str], daemon: int, guardian_pid: int) -> bool:
    """Where cgroups are used, the daemon is in the guardian's own; else nothing to see."""
    if guardian != GUARDIAN:
        return True
    line = Path(f"/proc/{daemon}/cgroup").read_text().splitlines()[-1]
    return line.endswith(f"/{CGROUP_PREFIX}{guardian_pid}")


# -- the guardian alone (fast) -----------------------------------------------------------------
def test_a_daemon_left_by_a_command_that_exited_is_ended_and_the_guardian_exits(
    tmp_path: Path, guardian: list[str]
) -> None:
    """Stdio passes through unchanged, stdin's end is the command's business, and its exit
    status is the guardian's; the daemon it left is ended before the guardian exits, and the
    guardian's cgroup removed."""
    pidfile = tmp_path / "pid"
    code = (
        "import subprocess, sys\n"
        f"subprocess.run([sys.executable, {DAEMONIZE!r}, {str(pidfile)!r}], check=True)\n"
        "print(sys.stdin.read().upper(), end='')\n"
        "sys.exit(3)"
    )
    piped: dict[str, Any] = {"stdin": subprocess.PIPE, "stdout": subprocess.PIPE, "text": True}
    with no_survivor(tmp_path):
        proc = subprocess.Popen([*guardian, sys.executable, "-c", code], **piped)
        out, _ = proc.communicate("said through\n", timeout=WAIT_S)
        assert (out, proc.returncode) == ("SAID THROUGH\n", 3)
        assert not alive(int(pidfile.read_text()))  # gone before the guardian exited
        cgroup = cgroup_of(proc.pid)
        assert cgroup is None or not os.path.exists(cgroup)  # its cgroup removed


@pytest.mark.parametrize("stubborn", [False, True], ids=["meek", "ignores-sigterm"])
def test_sigterm_to_the_guardian_ends_the_command_and_its_daemon(
    tmp_path: Path, guardian: list[str], stubborn: bool
) -> None:
    pidfile = tmp_path / "pid"
    how = ["stubborn"] if stubborn else []
    with no_survivor(tmp_path):
        proc = subprocess.Popen([*guardian, sys.executable, DAEMONIZE, str(pidfile), *how, "sleep"])
        daemon = daemon_pid(pidfile, proc)
        assert in_its_cgroup(guardian, daemon, proc.pid)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(WAIT_S) == 128 + signal.SIGTERM
        assert not alive(daemon)  # ended (SIGKILL after the grace) before the guardian exited


def test_the_guardian_ends_the_daemon_when_its_runner_is_killed_with_sigkill(
    tmp_path: Path, guardian: list[str]
) -> None:
    pidfile = tmp_path / "pid"
    command = [*guardian, sys.executable, DAEMONIZE, str(pidfile), "sleep"]
    start = f"import subprocess, time; subprocess.Popen({command!r}); time.sleep(600)"
    with no_survivor(tmp_path):
        runner = subprocess.Popen([sys.executable, "-c", start], text=True)
        try:
            daemon = daemon_pid(pidfile, runner)
            runner.kill()
            runner.wait(WAIT_S)
            wait_gone(daemon, "its runner's SIGKILL")
        finally:
            runner.kill()


async def test_a_terminals_daemon_ends_with_the_terminal(tmp_path: Path) -> None:
    """A command the agent asks for: its daemon ends when the command ends on its own, and
    when the terminals are closed at the run's stop."""
    terminals = Terminals()
    exited, running = tmp_path / "exited", tmp_path / "running"
    with no_survivor(tmp_path):
        first = await terminals.start(sys.executable, [DAEMONIZE, str(exited)], tmp_path, {}, None)
        await asyncio.wait_for(first.exited.wait(), WAIT_S)
        assert first.exit_code == 0
        assert not alive(int(exited.read_text()))  # its end is seen once the daemon is gone
        args = [DAEMONIZE, str(running), "sleep"]
        await terminals.start(sys.executable, args, tmp_path, {}, None)
        daemon = await asyncio.to_thread(daemon_pid, running)
        await terminals.close()
        assert not alive(daemon)


# What a process started for an env (not under a guardian) leaves as it is ended.
DAEMONIZES_ON_TERM = """import signal, subprocess, sys, time
def daemonize(*_):
    subprocess.run([sys.executable, sys.argv[1], sys.argv[2]], check=True)
    sys.exit(0)
signal.signal(signal.SIGTERM, daemonize)
open(sys.argv[3], "w").close()
time.sleep(600)
"""
END_CHILDREN = """import subprocess, sys, time
from pathlib import Path
from loopdeck.stop_signals import end_children
subprocess.Popen([sys.executable, "-c", sys.argv[1], *sys.argv[2:]])
while not Path(sys.argv[4]).exists():
    time.sleep(0.01)
end_children()
"""


def test_end_children_also_ends_a_daemon_started_as_its_parent_is_ended(tmp_path: Path) -> None:
    """loopdeck's end after a stop signal: a child that daemonizes when told to stop leaves
    an orphan that is re-parented to loopdeck (a subreaper by then) and ended too."""
    pidfile, ready = tmp_path / "pid", tmp_path / "ready"
    args = [DAEMONIZES_ON_TERM, DAEMONIZE, str(pidfile), str(ready)]
    with no_survivor(tmp_path):
        done = subprocess.run(
            [sys.executable, "-c", END_CHILDREN, *args], timeout=WAIT_S, check=False
        )
        assert done.returncode == 0 and ready.exists()
        wait_until(
            "no daemon left by end_children",
            lambda: not live_processes(str(pidfile), besides="\0"),
        )


# -- ACP runs -----------------------------------------------------------------------------------
def acp_run(tmp_path: Path, *agent_args: str) -> subprocess.Popen[str]:
    """`loopdeck acp --headless` on a folder, its check always met, the agent `setsid_agent`,
    in a session of its own (its group can be killed as a whole)."""
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    check = shlex.join([sys.executable, "-c", "pass"])
    agent = [sys.executable, str(TESTS / "setsid_agent.py"), *agent_args]
    return subprocess.Popen(
        [sys.executable, "-m", "loopdeck", "acp", "--goal", "Nothing to do.", "--workdir",
         str(work), "--check", check, "--headless", "--json", "--approve", "auto",
         "--db", str(tmp_path / "s.db"), "--", *agent],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip


@pytest.mark.slow  # seconds: loopdeck's start, the agent's
def test_an_acp_run_that_meets_its_goal_leaves_no_daemon(tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"
    with no_survivor(tmp_path):
        runner = acp_run(tmp_path, str(pidfile))
        try:
            out, err = runner.communicate(timeout=120)
        finally:
            runner.kill()
        assert last_json(out)["stop_reason"] == "goal_met", err
        assert not alive(int(pidfile.read_text()))  # the runner ended after the agent's stop


@pytest.mark.slow
@pytest.mark.parametrize("started_by", ["agent", "terminal"])
@pytest.mark.parametrize("how", ["SIGTERM", "SIGKILL", "SIGKILL-to-its-group"])
def test_a_signal_to_loopdeck_during_an_acp_turn_leaves_no_daemon(
    tmp_path: Path, how: str, started_by: str
) -> None:
    """SIGTERM: the run is killed and the agent stopped; SIGKILL, to loopdeck or to its whole
    process group: nobody stops the agent, its guardian (in a session of its own) sees its
    runner die. The daemon of the agent's, and one a command the agent ran started."""
    pidfile, term = tmp_path / "pid", tmp_path / "pid.term"
    with no_survivor(tmp_path):
        runner = acp_run(
            tmp_path, str(pidfile), "hang", *(["terminal"] if started_by == "terminal" else [])
        )
        try:
            daemons = [daemon_pid(pidfile, runner)]
            wait_until("the agent's turn", pidfile.with_name("pid.turn").exists)
            if started_by == "terminal":
                daemons.append(daemon_pid(term, runner))
            if how == "SIGKILL-to-its-group":
                os.killpg(runner.pid, signal.SIGKILL)
            else:
                runner.send_signal(getattr(signal, how))
            runner.communicate(timeout=60)
            assert runner.returncode == -getattr(signal, how.split("-")[0])
            for daemon in daemons:
                wait_gone(daemon, f"{how} to loopdeck")
        finally:
            runner.kill()


async def test_a_stopped_acp_run_has_ended_the_daemon_when_it_returns(tmp_path: Path) -> None:
    """In process: `AgentProcess.stop()` returns once everything the agent started is gone."""
    pidfile, work = tmp_path / "pid", tmp_path / "work"
    work.mkdir()
    agent = [sys.executable, str(TESTS / "setsid_agent.py"), str(pidfile), "hang"]
    acp = AcpTarget(goal="Nothing to do.", workdir=work, command=agent)
    prepared = prepare_run(RunOptions(env="acp:test", approve="auto", acp=acp))
    with no_survivor(tmp_path):
        run = asyncio.ensure_future(prepared.runtime.run())
        try:
            turn = pidfile.with_name("pid.turn")
            await asyncio.to_thread(wait_until, "the agent's turn", turn.exists)
            daemon = int(pidfile.read_text())
            prepared.runtime.kill(by="test")
            outcome = await asyncio.wait_for(run, WAIT_S)
        finally:
            prepared.cleanup()
        assert outcome.stop_reason is StopReason.KILLED
        assert not alive(daemon)


# -- MCP runs -----------------------------------------------------------------------------------
def mcp_run(tmp_path: Path, script: str) -> subprocess.Popen[str]:
    """`loopdeck run --headless` on an env whose MCP server daemonizes a child."""
    env = tmp_path / "env"
    env.mkdir()
    server = [sys.executable, str(TESTS / "daemon_mcp_server.py"), str(tmp_path / "pid")]
    (env / "scenario.toml").write_text(
        f"""\
name = "daemon_mcp"
goal = "Ping the server."
model = "scripted"
mode = "react"
goal_check = [{sys.executable!r}, "-c", "pass"]
[mcp]
command = {server!r}
snapshot = "none"
[scripts.ping]
[[scripts.ping.executor]]
tool = "ping"
[[scripts.ping.executor]]
final = "Pinged."
[scripts.hang]
[[scripts.hang.executor]]
tool = "hang"
args = {{ seconds = 600 }}
"""
    )
    return subprocess.Popen(
        [sys.executable, "-m", "loopdeck", "run", str(env), "--script", script, "--headless",
         "--json", "--approve", "auto", "--db", str(tmp_path / "s.db")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


@pytest.mark.slow
def test_an_mcp_run_that_ends_leaves_no_daemon(tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"
    with no_survivor(tmp_path):
        runner = mcp_run(tmp_path, "ping")
        try:
            out, err = runner.communicate(timeout=120)
        finally:
            runner.kill()
        assert runner.returncode == 0 and last_json(out)["stop_reason"] == "goal_met", err
        wait_gone(int(pidfile.read_text()), "the run's end")


@pytest.mark.slow
def test_kill_9_of_loopdeck_during_an_mcp_call_leaves_no_daemon(tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"
    with no_survivor(tmp_path):
        runner = mcp_run(tmp_path, "hang")
        try:
            daemon = daemon_pid(pidfile, runner)
            wait_until("the call in flight", pidfile.with_name("pid.turn").exists)
            runner.kill()
            runner.communicate(timeout=60)
            wait_gone(daemon, "SIGKILL to loopdeck")
        finally:
            runner.kill()
