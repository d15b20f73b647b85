"""What running real ACP agents found (issue 29): an agent answering its prompt with a
JSON-RPC error ends the run `tool_failure` with its words (never a crash); a real agent (no
`{script}` in its command) is asked for no script, and `loopdeck check` says it has nothing to
play; a guardian that cannot start leaves no stderr file; an ACP console run loads no
LiteLLM; the working copy's tree is walked with plain strings, its snapshot as before."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import prepare, run_env

from loopdeck.acp_env.agent_process import AgentFailed, AgentProcess
from loopdeck.acp_env.config import AgentConfig
from loopdeck.acp_env.workspace import WorkspaceEnvironment
from loopdeck.cli import main
from loopdeck.core.scenario import ScenarioError
from loopdeck.core.states import StopReason
from loopdeck.workdir.tree import SKIPPED, digest

FAILING_AGENT = """
import asyncio

from acp import PROTOCOL_VERSION, RequestError, run_agent, update_agent_message_text
from acp.schema import AgentCapabilities, InitializeResponse, NewSessionResponse


class FailsItsTurn:
    def on_connect(self, conn):
        self.conn = conn

    async def initialize(self, protocol_version, client_capabilities=None, client_info=None, **kw):
        return InitializeResponse(protocol_version=PROTOCOL_VERSION,
                                  agent_capabilities=AgentCapabilities())

    async def new_session(self, cwd, **kw):
        return NewSessionResponse(session_id="s1")

    async def prompt(self, session_id, prompt, **kw):
        await self.conn.session_update(session_id, update_agent_message_text("Looking."))
        raise RequestError.internal_error(
            {"details": "API Error: 400 {'type': 'invalid_request_error'}"})


asyncio.run(run_agent(FailsItsTurn()))
"""

SCENARIO = """
name = "fails"
goal = "Anything."
mode = "react"
goal_check = ["{python}", "-c", "raise SystemExit(1)"]

[agent]
acp = ["{python}", "{envdir}/fails.py"]
"""


def agent_env(tmp_path: Path, name: str, agent: str, scenario: str) -> Path:
    env = tmp_path / name
    (env / "workspace").mkdir(parents=True)
    (env / f"{name}.py").write_text(agent, encoding="utf-8")
    (env / "scenario.toml").write_text(scenario, encoding="utf-8")
    return env


@pytest.mark.slow  # an agent process's start: seconds (make stress)
async def test_an_agent_failing_its_prompt_stops_the_run_with_its_words(tmp_path: Path) -> None:
    env = agent_env(tmp_path, "fails", FAILING_AGENT, SCENARIO)
    outcome, _ = await run_env(env, None)  # type: ignore[arg-type]
    assert outcome.stop_reason is StopReason.TOOL_FAILURE, outcome.detail
    assert "failed its turn" in outcome.detail
    assert "Internal error" in outcome.detail
    assert "API Error: 400" in outcome.detail


SCRIPTED_AGENT = """
name = "scripted"
goal = "Anything."
mode = "react"
goal_check = ["{python}", "-c", "raise SystemExit(1)"]

[agent]
acp = ["{python}", "-m", "loopdeck.acp_env.scripted_agent", "{envdir}/scenario.toml", "{script}"]

[[scripts.other.turns]]
steps = [{ message = "hello" }]
"""


def test_a_real_agent_is_asked_for_no_script(tmp_path: Path) -> None:
    env = agent_env(tmp_path, "fails", FAILING_AGENT, SCENARIO)
    prepared, _ = prepare(env, None)  # type: ignore[arg-type]
    try:
        assert prepared.runtime.config.script is None
        assert prepared.runtime.config.model == "acp fails"
    finally:
        prepared.cleanup()


def test_the_scripted_agent_still_needs_its_script(tmp_path: Path) -> None:
    env = agent_env(tmp_path, "scripted", "", SCRIPTED_AGENT)
    with pytest.raises(ScenarioError, match="choose a script with --script; scripts: other"):
        prepare(env, None)  # type: ignore[arg-type]


def test_check_says_a_real_agent_has_nothing_to_play(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    expecting = SCENARIO + (
        '[scripts.solve]\nexpect = { stop_reason = "goal_met" }\n'
        '[[scripts.solve.turns]]\nsteps = [{ message = "not played" }]\n'
    )
    env = agent_env(tmp_path, "fails", FAILING_AGENT, expecting)
    assert main(["check", str(env)]) == 0  # the real agent not started, no FAIL
    out = capsys.readouterr().out
    assert "nothing to play: `acp fails` is a real agent" in out


async def test_a_guardian_that_cannot_start_leaves_no_stderr_file(tmp_path: Path) -> None:
    errlog = tmp_path / "agent-stderr.log"
    agent = AgentProcess(["agent"], tmp_path / "no-such-folder", errlog)
    with pytest.raises(AgentFailed, match="could not start"):
        await agent.start(object(), AgentConfig(acp=["agent"]))
    assert agent.proc is None and errlog.exists()
    await agent.stop()
    assert not errlog.exists()


ACP_CONSOLE_LINK = """
import asyncio, sys
from types import SimpleNamespace
from loopdeck.acp_env.opening import AgentsOwnModel
from loopdeck.core.events import EventBus
from loopdeck.operator.links import LocalLink

class Session:
    runtime = SimpleNamespace(model=AgentsOwnModel("acp x"), env_thread=SimpleNamespace(),
                              bus=EventBus())
    queue = None
    async def run(self, phase):
        return "ran"

link = LocalLink(Session())
print(link.phase)
print(asyncio.run(link.drive()), "litellm" in sys.modules)
"""


def test_an_acp_console_run_loads_no_model_library() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", ACP_CONSOLE_LINK], capture_output=True, text=True, check=True
    )
    assert proc.stdout.splitlines() == ["the run to start", "ran False"]


async def test_a_model_with_a_library_is_prepared_before_the_run() -> None:
    from types import SimpleNamespace

    from loopdeck.core.events import EventBus
    from loopdeck.operator.links import LocalLink

    said: list[str] = []

    class Model:
        async def prepare(self) -> None:
            said.append("prepared")

    class Session:
        runtime = SimpleNamespace(model=Model(), env_thread=SimpleNamespace(), bus=EventBus())
        queue = None

        async def run(self, phase):  # type: ignore[no-untyped-def]
            said.append(f"ran after waiting for {link.phase}")
            return "ran"

    link = LocalLink(Session())  # type: ignore[arg-type]
    assert "LiteLLM" in link.phase
    assert await link.drive() == "ran"  # type: ignore[comparison-overlap]
    assert said == ["prepared", "ran after waiting for the run to start"]


def walked_as_before(workdir: Path) -> dict[str, str]:
    """The working copy's tree as `os.walk` and pathlib find it: what the snapshot must be."""
    files = {}
    for folder, dirs, names in os.walk(workdir):
        dirs[:] = [d for d in dirs if d not in SKIPPED]
        for name in names:
            path = Path(folder) / name
            if not path.is_symlink():  # a link is an entry of its own: its target's text
                files[path.relative_to(workdir).as_posix()] = digest(str(path))
    return dict(sorted(files.items()))


def test_the_working_copy_s_tree_is_walked_as_before(tmp_path: Path) -> None:
    work = tmp_path / "work"
    for rel in ("a.py", "pkg/b.py", "pkg/deep/c.txt", "pkg/node_modules/x.js", ".git/HEAD",
                "docs/.venv/lib.py", "docs/readme.md", "ünïcode/名前.txt"):  # fmt: skip
        (work / rel).parent.mkdir(parents=True, exist_ok=True)
        (work / rel).write_text(f"content of {rel}\n", encoding="utf-8")
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "o.txt").write_text("outside\n")
    (work / "linked_folder").symlink_to(tmp_path / "outside")  # not followed
    (work / "linked_file.py").symlink_to(work / "a.py")  # its target's content
    (work / "broken").symlink_to(tmp_path / "nothing")
    workspace = WorkspaceEnvironment(work, {})
    files = workspace.snapshot()["files"]
    links = ("linked_folder", "linked_file.py", "broken")
    assert {k: v for k, v in files.items() if k not in links} == walked_as_before(work)
    assert list(files) == sorted(files)
    assert "pkg/deep/c.txt" in files and "ünïcode/名前.txt" in files
    assert not any(part in SKIPPED for rel in files for part in rel.split("/"))
    # a link is never followed: an entry of its own, the text it points to (issue 38)
    assert all(files[link].startswith("link ") for link in links)
    assert files["linked_file.py"] != files["a.py"]
    assert "linked_folder/o.txt" not in files


def test_a_file_is_hashed_again_only_where_its_size_mtime_or_ctime_moved(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A same-size rewrite with its old mtime put back (`os.utime`, as an agent hiding a
    write would) still moves the file's ctime, which nobody can set: it is read again and
    seen changed. A file nothing touched is not read again."""
    from loopdeck.workdir import tree

    read: list[str] = []
    monkeypatch.setattr(tree, "digest", lambda path: read.append(path) or digest(path))
    (tmp_path / "f.txt").write_text("one\n")
    (tmp_path / "g.txt").write_text("kept\n")
    workspace = WorkspaceEnvironment(tmp_path, {})
    first = workspace.snapshot()["files"]["f.txt"]
    read.clear()
    assert workspace.snapshot()["files"]["f.txt"] == first and read == []  # nothing moved
    stat = (tmp_path / "f.txt").stat()
    (tmp_path / "f.txt").write_text("two\n")  # same size, and its mtime put back
    os.utime(tmp_path / "f.txt", ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert (tmp_path / "f.txt").stat().st_mtime_ns == stat.st_mtime_ns
    assert workspace.snapshot()["files"]["f.txt"] == digest(str(tmp_path / "f.txt")) != first
    assert read == [str(tmp_path / "f.txt")]  # g.txt, untouched, not read again
    (tmp_path / "f.txt").unlink()
    assert list(workspace.snapshot()["files"]) == ["g.txt"]


def test_a_fifo_in_the_working_copy_is_an_entry_never_opened(tmp_path: Path) -> None:
    """A user's folder worked on in place may hold a named pipe: opening it to hash it would
    block the env thread for good. It is an entry by its kind (issue 38)."""
    (tmp_path / "a.py").write_text("a\n")
    os.mkfifo(tmp_path / "pipe")
    files = WorkspaceEnvironment(tmp_path, {}).snapshot()["files"]
    assert list(files) == ["a.py", "pipe"] and files["pipe"] == "special fifo"


@pytest.mark.slow  # an agent process's start: seconds (make stress)
async def test_tokens_an_agent_never_reports_are_unknown_never_zero() -> None:
    """An agent that sends no usage (Gemini CLI) leaves its tokens unknown in the budget's
    event and the outcome (JSON `null`, the summary's "unknown"); one that does has them."""
    from conftest import SAMPLES

    from loopdeck.core.events import BudgetUpdated

    silent, rec = await run_env(SAMPLES / "calc_acp", "reject", approve="deny")
    assert silent.tokens is None
    assert [e for e in rec.events if isinstance(e, BudgetUpdated)][-1].tokens_unknown
    said, rec = await run_env(SAMPLES / "calc_acp", "solve")
    assert said.tokens == 1800
    assert not [e for e in rec.events if isinstance(e, BudgetUpdated)][-1].tokens_unknown
