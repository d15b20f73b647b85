"""Terminals loopdeck serves an ACP agent (issue 29): `terminal/create` a write of the run
(asked, guarded, bound to the working copy, started once), its cwd confined to the working
copy, its output's tail within the agent's limit, and no command outliving its run."""

from __future__ import annotations

import asyncio
import hashlib
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from conftest import Recorder
from process_helpers import live_processes

from loopdeck.acp_env.terminal_calls import commands_named
from loopdeck.acp_env.terminals import OutputTail, Terminals, command_line
from loopdeck.core.approvals import ApprovalDecision, ApprovalRequest
from loopdeck.core.events import CallStatus, EventBus
from loopdeck.core.states import StopReason
from loopdeck.operator.launch import RunOptions, prepare_run

WAIT_S = 30.0  # a guard against a hang, never a timing


def _env(tmp_path: Path, steps: str) -> Path:
    """An env whose scripted agent plays one turn of `steps` (TOML inline tables, one a line)
    on a working copy of one file; its goal is never met, so an unchanged copy stalls."""
    env = tmp_path / "env"
    (env / "workspace").mkdir(parents=True)
    (env / "workspace" / "notes.txt").write_text("notes\n")
    lines = ",\n".join(line.strip() for line in steps.strip().splitlines())
    (env / "scenario.toml").write_text(
        textwrap.dedent(
            """\
            name = "terminals"
            goal = "Run the command."
            mode = "react"
            goal_check = ["{python}", "-c", "raise SystemExit('never met')"]
            [agent]
            acp = ["{python}", "-m", "loopdeck.acp_env.scripted_agent",
                   "{envdir}/scenario.toml", "{script}"]
            [budgets]
            max_rounds = 2
            deadline_s = 120
            [[scripts.play.turns]]
            """
        )
        + f"steps = [\n{lines}\n]\n"
    )
    return env


def _python(code: str) -> str:
    """A terminal step's command: this interpreter running `code`."""
    return f'command = "{{python}}", args = ["-c", {_toml(code)}]'


def _step(terminal: str, tool: str = "Run it") -> str:
    """A tool step running a terminal (its fields as TOML)."""
    return f'{{ tool = "{tool}", kind = "execute", terminal = {{ {terminal} }} }}'


def _toml(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _marks(marker: Path) -> str:
    return f"open({str(marker)!r}, 'a').write('ran\\n')"


async def _run(env: Path, approve: str = "auto", approver: Any = None) -> tuple[Any, Recorder]:
    bus, recorder = EventBus(), Recorder()
    bus.subscribe(recorder)
    options = RunOptions(env=str(env), script="play", approve=approve)  # type: ignore[arg-type]
    prepared = prepare_run(options, approver=approver, bus=bus)
    try:
        outcome = await prepared.runtime.run()
    finally:
        prepared.cleanup()
    return outcome, recorder


def _finished(rec: Recorder, tool_prefix: str) -> list[Any]:
    return [e for e in rec.kinds("tool_finished") if e.tool.startswith(tool_prefix)]


# -- fast: the pieces ------------------------------------------------------------------------
def test_the_tail_keeps_the_last_bytes_and_starts_at_a_whole_character() -> None:
    tail = OutputTail(12)
    tail.add(("é" * 50 + "\n").encode())
    assert tail.truncated
    assert tail.text() == "é" * 5 + "\n"  # 12 bytes kept, the first a half character
    short = OutputTail(100)
    short.add(b"ok\n")
    assert (short.text(), short.truncated) == ("ok\n", False)


def test_the_commands_a_permitted_call_names() -> None:
    line = command_line("python", ["-m", "pytest", "-q"])
    assert line in commands_named({"command": "python", "args": ["-m", "pytest", "-q"]})
    assert commands_named({"command": ["bash", "-c", "make test"]}) >= {"make test"}
    assert commands_named({"command": "make test"}) == {"make test"}
    assert commands_named({"path": "calc.py"}) == set() == commands_named("text")


@pytest.mark.slow  # an agent process's start: seconds (make stress)
async def test_a_terminal_runs_without_a_shell_and_kill_ends_its_group(tmp_path: Path) -> None:
    terminals = Terminals()
    echo = await terminals.start(sys.executable, ["-c", "print('$HOME;')"], tmp_path, {}, None)
    await asyncio.wait_for(echo.exited.wait(), WAIT_S)
    assert (echo.tail.text(), echo.exit_code, echo.signal) == ("$HOME;\n", 0, None)
    pidfile = tmp_path / "pid"
    code = f"import os, time; open({str(pidfile)!r}, 'w').write(str(os.getpid())); time.sleep(600)"
    sleeper = await terminals.start(sys.executable, ["-c", code], tmp_path, {}, None)
    pid = await _pid_from(pidfile)
    terminals.release(sleeper.id)  # kills, and forgets
    await _gone(pid)
    assert terminals.result_of(sleeper.id) is not None  # still shown where it is embedded
    with pytest.raises(Exception, match="no terminal"):
        terminals.get(sleeper.id)
    await terminals.close()
    assert not terminals.releasing


async def _pid_from(pidfile: Path) -> int:
    async with asyncio.timeout(WAIT_S):
        while not pidfile.exists() or not pidfile.read_text():
            await asyncio.sleep(0.02)
    return int(pidfile.read_text())


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return ") Z" not in stat


async def _gone(pid: int) -> None:
    async with asyncio.timeout(WAIT_S):
        while _alive(pid):
            await asyncio.sleep(0.02)


# -- runs: the scripted agent asks for terminals -----------------------------------------------
@pytest.mark.slow  # an agent process and a run each: `make stress`
async def test_an_approved_terminal_runs_once_and_its_output_reaches_the_agent(
    tmp_path: Path,
) -> None:
    marker = tmp_path / "ran"
    code = _marks(marker) + "; print('hello from the terminal')"
    env = _env(
        tmp_path, f'{{ tool = "Run it", kind = "execute", terminal = {{ {_python(code)} }} }}'
    )
    outcome, rec = await _run(env)
    assert outcome.stop_reason is StopReason.STALLED, outcome.detail
    assert marker.read_text() == "ran\n"
    [asked] = rec.kinds("approval_requested")
    assert asked.tool == "terminal"
    assert asked.args == {"command": sys.executable, "args": ["-c", code], "cwd": ".", "env": {}}
    [ran] = _finished(rec, "terminal: ")
    assert ran.status is CallStatus.EXECUTED
    assert ran.result["data"]["exit_code"] == 0
    assert "hello from the terminal" in ran.result["data"]["output"]
    [agents] = _finished(rec, "execute: Run it")  # the agent's call, reporting the output
    assert agents.status is CallStatus.EXECUTED
    assert "hello from the terminal" in agents.result["data"]["text"]
    [embedded] = agents.result["data"]["terminals"]
    assert embedded["exit_code"] == 0


@pytest.mark.slow
async def test_a_rejected_terminal_never_runs_and_the_agent_gets_the_error(
    tmp_path: Path,
) -> None:
    marker = tmp_path / "ran"
    env = _env(
        tmp_path,
        f'{{ tool = "Run it", kind = "execute", terminal = {{ {_python(_marks(marker))} }} }}',
    )
    bus, rec = EventBus(), Recorder()
    bus.subscribe(rec)
    prepared = prepare_run(RunOptions(env=str(env), script="play", approve="deny"), bus=bus)
    try:
        outcome = await prepared.runtime.run()
    finally:
        prepared.cleanup()
    assert outcome.stop_reason is StopReason.STALLED, outcome.detail
    assert not marker.exists()
    [ran] = _finished(rec, "terminal: ")
    assert ran.status is CallStatus.REJECTED
    [agents] = _finished(rec, "execute: Run it")
    assert agents.status is CallStatus.FAILED
    # `--approve deny` refused it, not the operator: told in its own words
    denied = "was not run: writes are denied in this run (--approve deny)"
    assert denied in agents.result["error"]["message"]
    assert "operator" not in agents.result["error"]["message"]
    notes = prepared.runtime.agent.calls.notes  # what the next prompt would say
    assert any(note.startswith("terminal: ") and note.endswith(denied) for note in notes), notes


@pytest.mark.slow
async def test_a_cwd_outside_the_working_copy_is_refused(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    step = _step(f'{_python(_marks(marker))}, cwd = "/"')
    outcome, rec = await _run(_env(tmp_path, step))
    assert outcome.stop_reason is StopReason.STALLED, outcome.detail
    assert not marker.exists()
    # Recorded, though never asked of anyone: a call refused by loopdeck, with its reason.
    [terminal] = _finished(rec, "terminal: ")
    assert terminal.status is CallStatus.REJECTED
    assert "outside the run's working copy" in terminal.result["error"]["message"]
    [decided] = rec.kinds("approval_decided")
    assert decided.call_id == terminal.call_id and not decided.approved
    assert decided.decided_by is not None and decided.decided_by.who == "loopdeck"
    [agents] = _finished(rec, "execute: Run it")
    assert "outside the run's working copy" in agents.result["error"]["message"]


@pytest.mark.slow
async def test_output_over_the_agents_limit_keeps_its_tail_marked_truncated(
    tmp_path: Path,
) -> None:
    code = "print('x' * 5000); print('é' * 50)"
    step = _step(f"{_python(code)}, output_byte_limit = 12")
    _, rec = await _run(_env(tmp_path, step))
    [ran] = _finished(rec, "terminal: ")
    assert ran.result["data"]["truncated"] is True
    assert ran.result["data"]["output"] == "é" * 5 + "\n"
    [agents] = _finished(rec, "execute: Run it")
    assert agents.result["data"]["text"] == "exit 0 (output truncated)\n" + "é" * 5 + "\n"


class ApprovesThenWatches:
    """Approves every ask; the test kills the run once the command is running."""

    async def ask(self, request: ApprovalRequest) -> ApprovalDecision:
        return ApprovalDecision(call_id=request.call_id, approved=True, by="test")


@pytest.mark.slow
async def test_a_killed_run_leaves_no_terminal_process(tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"
    code = f"import os, time; open({str(pidfile)!r}, 'w').write(str(os.getpid())); time.sleep(600)"
    env = _env(tmp_path, f'{{ tool = "Wait", kind = "execute", terminal = {{ {_python(code)} }} }}')
    bus, rec = EventBus(), Recorder()
    bus.subscribe(rec)
    options = RunOptions(env=str(env), script="play")
    prepared = prepare_run(options, approver=ApprovesThenWatches(), bus=bus)
    run = asyncio.ensure_future(prepared.runtime.run())
    try:
        pid = await _pid_from(pidfile)
        assert _alive(pid)
        prepared.runtime.kill(by="test")
        outcome = await asyncio.wait_for(run, WAIT_S)
    finally:
        prepared.cleanup()
    assert outcome.stop_reason is StopReason.KILLED
    [ran] = _finished(rec, "terminal: ")
    assert ran.status is CallStatus.FAILED and ran.result["data"]["signal"] == "SIGTERM"
    await _gone(pid)  # its guardian ends the group: no orphan
    async with asyncio.timeout(WAIT_S):  # nor the guardian: the terminal's end is seen
        while live_processes(str(pidfile), besides="\0") or not _all_seen(prepared):
            await asyncio.sleep(0.02)


def _all_seen(prepared: Any) -> bool:
    terminals = prepared.runtime.agent.calls.terminals.terminals
    watchers = [t.watcher for t in terminals.live.values()] + list(terminals.releasing)
    return all(w is None or w.done() for w in watchers)


@pytest.mark.slow
async def test_the_guard_blocks_an_identical_terminal_on_an_unchanged_copy(
    tmp_path: Path,
) -> None:
    marker = tmp_path / "ran"
    terminal = f"terminal = {{ {_python(_marks(marker))} }}"
    steps = f"""
        {{ tool = "Run it", kind = "execute", {terminal} }}
        {{ tool = "Run it again", kind = "execute", {terminal} }}
    """
    outcome, rec = await _run(_env(tmp_path, steps))
    assert outcome.stop_reason is StopReason.NO_PROGRESS, outcome.detail
    assert [e.tool.split(":")[0] for e in rec.kinds("guard_tripped")] == ["terminal"]
    assert marker.read_text() == "ran\n"  # once


@pytest.mark.slow
async def test_a_permitted_call_naming_the_command_is_not_asked_twice(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    step = (
        f'{{ tool = "Run it", kind = "execute", permission = true,'
        f" terminal = {{ {_python(_marks(marker))} }} }}"
    )
    _, rec = await _run(_env(tmp_path, step))
    assert [e.tool for e in rec.kinds("approval_requested")] == ["execute"]
    [ran] = _finished(rec, "terminal: ")
    assert ran.status is CallStatus.EXECUTED and ran.result["data"]["permitted_by"] == "c1"
    assert marker.read_text() == "ran\n"


@pytest.mark.slow
async def test_a_terminals_environment_is_shown_with_its_values_and_runs_as_shown(
    tmp_path: Path,
) -> None:
    """A `PYTHONPATH` runs code of its own: the approval shows the value (issue 38), and the
    command runs with the environment as approved; a permission naming the command does not
    cover a terminal carrying variables (asked, their values shown)."""
    marker = tmp_path / "ran"
    code = f"import os; open({str(marker)!r}, 'a').write(os.environ['PYTHONPATH'])"
    terminal = _python(code) + ', env = { PYTHONPATH = "/evil" }'
    step = (
        f'{{ tool = "Run it", kind = "execute", permission = true, terminal = {{ {terminal} }} }}'
    )
    _, rec = await _run(_env(tmp_path, step))
    asked = rec.kinds("approval_requested")
    assert [e.tool.split(":")[0] for e in asked] == ["execute", "terminal"], asked
    assert asked[1].args["env"] == {"PYTHONPATH": "/evil"}
    [ran] = _finished(rec, "terminal: ")
    assert "permitted_by" not in ran.result["data"]
    assert marker.read_text() == "/evil"


@pytest.mark.slow
async def test_a_secret_looking_variable_is_recorded_as_its_digest_and_runs_with_its_value(
    tmp_path: Path,
) -> None:
    """A key the agent passes to a command (`*KEY*`, `*TOKEN*`, `*SECRET*`, `*PASSWORD*`) is
    shown and recorded as `sha256:…` of its value, never the value; approved as shown, the
    command runs with the agent's value. Other variables are shown in full."""
    marker = tmp_path / "ran"
    code = (f"import os; open({str(marker)!r}, 'a')"
            ".write(os.environ['API_TOKEN'] + '|' + os.environ['PLAIN'])")  # fmt: skip
    terminal = _python(code) + ', env = { API_TOKEN = "sk-secret-123", PLAIN = "shown" }'
    _, rec = await _run(_env(tmp_path, _step(terminal)))
    [asked] = [e for e in rec.kinds("approval_requested") if e.tool.startswith("terminal")]
    digest = "sha256:" + hashlib.sha256(b"sk-secret-123").hexdigest()
    assert asked.args["env"] == {"API_TOKEN": digest, "PLAIN": "shown"}
    assert marker.read_text() == "sk-secret-123|shown"
    recorded = [e.model_dump_json() for e in rec.events]
    assert not [line for line in recorded if "sk-secret-123" in line]


def test_a_terminal_recorded_with_its_variables_names_alone_is_still_valid() -> None:
    """A record from before the values were shown (`env` a list of names): a resume or a
    fork of that run validates it as it did."""
    from loopdeck.acp_env.terminals import TerminalInput

    given = {"command": "make", "args": [], "cwd": ".", "env": ["CC"]}
    assert TerminalInput.model_validate(given).env == ["CC"]
