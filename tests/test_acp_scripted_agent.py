"""loopdeck's scripted ACP agent, driven over stdio by the SDK's own client: what it sends for
each step of a script, how it answers permissions, cancel and modes, and its misbehaviours."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from acp import PROTOCOL_VERSION, RequestError, spawn_agent_process, text_block
from acp.core import ClientSideConnection
from acp.schema import (
    AgentMessageChunk,
    AgentPlanUpdate,
    AgentThoughtChunk,
    AllowedOutcome,
    ClientCapabilities,
    CreateTerminalResponse,
    DeniedOutcome,
    FileSystemCapabilities,
    Implementation,
    ReadTextFileResponse,
    ReleaseTerminalResponse,
    RequestPermissionResponse,
    TerminalOutputResponse,
    ToolCallProgress,
    ToolCallStart,
    ToolCallUpdate,
    UsageUpdate,
    WaitForTerminalExitResponse,
    WriteTextFileResponse,
)

from loopdeck.acp_env.scripted_agent import NO_TURN_LEFT
from loopdeck.acp_env.scripted_steps import REFUSED

SAMPLE = Path(__file__).resolve().parents[1] / "sample_envs" / "calc_acp"
MODULE = "loopdeck.acp_env.scripted_agent"
FIXED = "def add(a, b):\n    return a + b\n\n\ndef mul(a, b):\n    return a * b\n"
WAIT_S = 60.0  # a guard against a hang, never a timing (a loaded machine: an agent starts slowly)


class Client:
    """The client side: records every update, answers permissions from a list ("hold" waits
    for `release`), and serves fs/* from the working copy."""

    def __init__(self, workdir: Path, answers: list[str] | None = None) -> None:
        self.workdir = workdir
        self.answers = list(answers or [])
        self.updates: list[Any] = []
        self.asked: list[tuple[ToolCallUpdate, list[str]]] = []
        self.writes: list[tuple[str, str]] = []
        self.reads: list[str] = []
        self.terminal_calls: list[tuple[str, Any]] = []  # (method, what it was given)
        self._held: asyncio.Future[str] | None = None
        self._changed = asyncio.Event()

    async def request_permission(
        self, session_id: str, tool_call: ToolCallUpdate, options: list[Any], **kwargs: Any
    ) -> RequestPermissionResponse:
        self.asked.append((tool_call, [option.option_id for option in options]))
        answer = self.answers.pop(0)
        if answer == "hold":
            self._held = asyncio.get_running_loop().create_future()
            self._changed.set()
            answer = await self._held
        if answer == "cancelled":
            return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))
        selected = AllowedOutcome(outcome="selected", option_id=answer)
        return RequestPermissionResponse(outcome=selected)

    def release(self, answer: str) -> None:
        assert self._held is not None
        self._held.set_result(answer)

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        self.updates.append(update)
        self._changed.set()

    async def write_text_file(
        self, session_id: str, path: str, content: str, **kwargs: Any
    ) -> WriteTextFileResponse:
        target = Path(path)
        assert target.is_absolute() and target.parent == self.workdir, path
        target.write_text(content)
        self.writes.append((path, content))
        return WriteTextFileResponse()

    async def read_text_file(
        self, session_id: str, path: str, **kwargs: Any
    ) -> ReadTextFileResponse:
        self.reads.append(path)
        if not Path(path).is_file():
            raise RequestError.resource_not_found(path)
        return ReadTextFileResponse(content=Path(path).read_text())

    async def create_terminal(
        self, session_id: str, command: str, args: list[str] | None = None, **kwargs: Any
    ) -> CreateTerminalResponse:
        self.terminal_calls.append(("create", (command, args, kwargs)))
        return CreateTerminalResponse(terminal_id="term-7")

    async def wait_for_terminal_exit(
        self, session_id: str, terminal_id: str, **kwargs: Any
    ) -> WaitForTerminalExitResponse:
        self.terminal_calls.append(("wait", terminal_id))
        return WaitForTerminalExitResponse(exit_code=1)

    async def terminal_output(
        self, session_id: str, terminal_id: str, **kwargs: Any
    ) -> TerminalOutputResponse:
        self.terminal_calls.append(("output", terminal_id))
        return TerminalOutputResponse(output="1 failed", truncated=True)

    async def release_terminal(
        self, session_id: str, terminal_id: str, **kwargs: Any
    ) -> ReleaseTerminalResponse:
        self.terminal_calls.append(("release", terminal_id))
        return ReleaseTerminalResponse()

    async def until(self, predicate: Callable[[], bool]) -> None:
        async with asyncio.timeout(WAIT_S):
            while not predicate():
                self._changed.clear()
                await self._changed.wait()

    def held(self) -> bool:
        return self._held is not None

    def of(self, kind: type) -> list[Any]:
        return [u for u in self.updates if isinstance(u, kind)]

    def texts(self, kind: type = AgentMessageChunk) -> list[str]:
        return [u.content.text for u in self.of(kind)]

    def tool_updates(self, call_id: str) -> list[ToolCallProgress]:
        return [u for u in self.of(ToolCallProgress) if u.tool_call_id == call_id]


@dataclass
class Agent:
    conn: ClientSideConnection
    session_id: str
    proc: asyncio.subprocess.Process

    async def prompt(self, text: str = "Fix the tests") -> str:
        response = await asyncio.wait_for(
            self.conn.prompt(session_id=self.session_id, prompt=[text_block(text)]), WAIT_S
        )
        return response.stop_reason


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    return Path(shutil.copytree(SAMPLE / "workspace", tmp_path / "work"))


@contextlib.asynccontextmanager
async def agent(
    client: Client, script: str, scenario: Path = SAMPLE / "scenario.toml"
) -> AsyncIterator[Agent]:
    errlog = client.workdir.parent / "agent-stderr.log"
    with errlog.open("wb") as stderr, said_on_stderr(errlog):
        async with spawn_agent_process(
            client,
            sys.executable,
            "-m",
            MODULE,
            str(scenario),
            script,
            cwd=client.workdir,
            transport_kwargs={"stderr": stderr},
        ) as (conn, proc):
            capabilities = ClientCapabilities(
                fs=FileSystemCapabilities(read_text_file=True, write_text_file=True)
            )
            init = await conn.initialize(
                protocol_version=PROTOCOL_VERSION,
                client_capabilities=capabilities,
                client_info=Implementation(name="loopdeck-tests", version="0"),
            )
            assert init.protocol_version == PROTOCOL_VERSION
            session = await conn.new_session(cwd=str(client.workdir), mcp_servers=[])
            yield Agent(conn, session.session_id, proc)


@contextlib.contextmanager
def said_on_stderr(errlog: Path) -> Iterator[None]:
    """A failure carries what the agent said on stderr (a traceback names why it went away)."""
    try:
        yield
    except Exception as exc:
        exc.add_note("agent stderr:\n" + errlog.read_text(errors="replace")[-3000:])
        raise


def scenario_with(tmp_path: Path, scripts: str) -> Path:
    path = tmp_path / "scenario.toml"
    head = 'name = "t"\ngoal = "g"\nmode = "react"\n[agent]\nacp = ["x"]\n'
    path.write_text(head + textwrap.dedent(scripts))
    return path


async def test_solve_reads_asks_and_writes_through_the_client(workdir: Path) -> None:
    client = Client(workdir, answers=["allow"])
    async with agent(client, "solve") as run:
        assert await run.prompt() == "end_turn"
    target = str(workdir / "calc.py")
    [plan] = client.of(AgentPlanUpdate)
    assert [(e.content, e.status) for e in plan.entries] == [
        ("Read calc.py", "in_progress"),
        ("Fix add", "pending"),
        ("Say what changed", "pending"),
    ]
    read, edit = client.of(ToolCallStart)
    assert (read.tool_call_id, read.kind, read.status) == ("call_1", "read", "pending")
    assert client.reads == [target]
    assert client.tool_updates("call_1")[-1].status == "completed"
    assert "return a - b" in client.tool_updates("call_1")[-1].content[0].content.text
    assert (edit.tool_call_id, edit.title, edit.kind) == ("call_2", "Fix add in calc.py", "edit")
    assert edit.raw_input == {"path": "calc.py"}
    [diff] = edit.content
    assert (diff.path, diff.new_text) == (target, FIXED)
    assert "return a - b" in diff.old_text
    assert [loc.path for loc in edit.locations] == [target]
    [(asked, options)] = client.asked
    assert asked.tool_call_id == "call_2" and options == ["allow", "allow_always", "reject"]
    assert client.writes == [(target, FIXED)]
    assert (workdir / "calc.py").read_text() == FIXED
    statuses = [u.status for u in client.tool_updates("call_2")]
    assert statuses == ["in_progress", "completed"]
    [usage] = client.of(UsageUpdate)
    assert (usage.used, usage.size, usage.cost.amount, usage.cost.currency) == (
        1800,
        200000,
        0.01,
        "USD",
    )
    assert client.texts(AgentThoughtChunk) == ["add subtracts; it should add."]
    assert client.texts() == ["Fixed add in calc.py: it returned a - b."]


@pytest.mark.slow  # an agent process each: `make stress` plays them (CI too)
async def test_a_refused_write_is_not_done_and_ends_the_turn(workdir: Path) -> None:
    client = Client(workdir, answers=["reject"])
    async with agent(client, "reject") as run:
        assert await run.prompt() == "end_turn"
        assert await run.prompt() == "end_turn"  # no turn left
    assert client.writes == []
    assert "return a - b" in (workdir / "calc.py").read_text()
    assert [u.status for u in client.tool_updates("call_1")] == ["failed"]
    assert client.texts() == [REFUSED, NO_TURN_LEFT]  # "Fixed add." never said


CANCEL_SCRIPTS = """
[[scripts.edit.turns]]
steps = [
  { tool = "Fix add", permission = true, write = { path = "calc.py", content = "x = 1\\n" } },
  { message = "after the edit" },
]
[[scripts.stubborn.turns]]
ignore_cancel = true
steps = [
  { tool = "Fix add", permission = true, write = { path = "calc.py", content = "x = 1\\n" } },
  { message = "after the edit" },
]
"""


@pytest.mark.slow  # an agent process each: `make stress` plays them (CI too)
@pytest.mark.parametrize("answer", ["cancelled", "allow"])
async def test_cancel_while_a_permission_waits_ends_the_turn_cancelled(
    workdir: Path, tmp_path: Path, answer: str
) -> None:
    """Answered `cancelled` as the spec asks, or even allowed: nothing is written."""
    client = Client(workdir, answers=["hold"])
    async with agent(client, "edit", scenario_with(tmp_path, CANCEL_SCRIPTS)) as run:
        prompt = asyncio.ensure_future(run.prompt())
        await client.until(client.held)
        await run.conn.cancel(session_id=run.session_id)
        client.release(answer)
        assert await prompt == "cancelled"
    assert client.writes == []
    assert client.tool_updates("call_1")[-1].status == "failed"
    assert client.texts() == []


@pytest.mark.slow  # an agent process each: `make stress` plays them (CI too)
async def test_a_turn_that_ignores_cancel_keeps_going(workdir: Path, tmp_path: Path) -> None:
    client = Client(workdir, answers=["hold"])
    async with agent(client, "stubborn", scenario_with(tmp_path, CANCEL_SCRIPTS)) as run:
        prompt = asyncio.ensure_future(run.prompt())
        await client.until(client.held)
        await run.conn.cancel(session_id=run.session_id)
        client.release("allow")
        assert await prompt == "end_turn"
    assert client.writes == [(str(workdir / "calc.py"), "x = 1\n")]
    assert client.texts() == ["after the edit"]


@pytest.mark.slow  # an agent process each: `make stress` plays them (CI too)
async def test_turns_play_in_order_then_the_repeat_turn_again(
    workdir: Path, tmp_path: Path
) -> None:
    scenario = scenario_with(
        tmp_path,
        """
        [[scripts.s.turns]]
        steps = [{ tool = "Look", kind = "search" }, { message = "one" }]
        [[scripts.s.turns]]
        repeat = true
        stop = "max_tokens"
        steps = [{ message = "again" }, { usage = { used = 10, cost = 0.25 } }]
        """,
    )
    client = Client(workdir)
    async with agent(client, "s", scenario) as run:
        assert [await run.prompt() for _ in range(3)] == ["end_turn", "max_tokens", "max_tokens"]
    assert client.texts() == ["one", "again", "again"]
    assert [u.status for u in client.tool_updates("call_1")] == ["in_progress", "completed"]
    # The cost is the session's total so far, as ACP's usage_update says.
    assert [u.cost.amount for u in client.of(UsageUpdate)] == [0.25, 0.5]


@pytest.mark.slow  # an agent process each: `make stress` plays them (CI too)
async def test_modes_auto_writes_without_asking_and_an_unknown_one_is_refused(
    workdir: Path,
) -> None:
    client = Client(workdir)
    async with agent(client, "solve") as run:
        with pytest.raises(RequestError) as refused:
            await run.conn.set_session_mode(session_id=run.session_id, mode_id="yolo")
        assert refused.value.code == -32602 and "yolo" in str(refused.value.data)
        await run.conn.set_session_mode(session_id=run.session_id, mode_id="auto")
        assert await run.prompt() == "end_turn"
    assert client.asked == []
    assert (workdir / "calc.py").read_text() == FIXED


@pytest.mark.slow  # an agent process each: `make stress` plays them (CI too)
async def test_the_session_reports_its_modes(workdir: Path) -> None:
    client = Client(workdir)
    async with agent(client, "solve") as run:
        session = await run.conn.new_session(cwd=str(workdir), mcp_servers=[])
    assert session.session_id == "scripted-2" and run.session_id == "scripted-1"
    assert session.modes is not None and session.modes.current_mode_id == "default"
    assert [m.id for m in session.modes.available_modes] == ["default", "auto"]


async def test_exit_mid_turn_closes_the_connection(workdir: Path) -> None:
    client = Client(workdir)
    async with agent(client, "dies") as run:
        with pytest.raises(ConnectionError):
            await run.prompt()
        assert await asyncio.wait_for(run.proc.wait(), WAIT_S) == 3
    assert client.of(AgentPlanUpdate) and client.reads
    stderr = (workdir.parent / "agent-stderr.log").read_text()
    assert "scripted agent: exiting with 3 mid-turn" in stderr


@pytest.mark.slow  # an agent process each: `make stress` plays them (CI too)
async def test_a_garbage_line_is_skipped_and_the_turn_goes_on(
    workdir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    client = Client(workdir, answers=["allow"])
    # The SDK says it on the root logger; once an ACP run of loopdeck's has started in this
    # process, it is kept at DEBUG on `loopdeck.acp` instead: either way it is said.
    with caplog.at_level(logging.DEBUG):
        async with agent(client, "garbage") as run:
            assert await run.prompt() == "end_turn"
    assert "Error parsing JSON-RPC message" in caplog.text
    assert (workdir / "calc.py").read_text() == FIXED
    assert client.texts() == ["Fixed add in calc.py."]


@pytest.mark.slow  # an agent process each: `make stress` plays them (CI too)
async def test_direct_write_never_asks_nor_uses_the_client(workdir: Path) -> None:
    client = Client(workdir)
    async with agent(client, "direct-write") as run:
        assert await run.prompt() == "end_turn"
    assert client.asked == [] and client.writes == []
    assert (workdir / "calc.py").read_text() == FIXED
    assert [u.status for u in client.tool_updates("call_1")] == ["completed"]


@pytest.mark.slow  # an agent process each: `make stress` plays them (CI too)
async def test_early_update_says_in_progress_before_the_answer(workdir: Path) -> None:
    client = Client(workdir, answers=["hold"])
    async with agent(client, "early-update") as run:
        prompt = asyncio.ensure_future(run.prompt())
        await client.until(lambda: bool(client.tool_updates("call_1")))
        assert client.held() and client.writes == []
        assert [u.status for u in client.tool_updates("call_1")] == ["in_progress"]
        client.release("allow")
        assert await prompt == "end_turn"
    assert [u.status for u in client.tool_updates("call_1")] == ["in_progress", "completed"]


@pytest.mark.slow  # an agent process each: `make stress` plays them (CI too)
async def test_ignore_rejection_writes_after_a_reject(workdir: Path) -> None:
    client = Client(workdir, answers=["reject"])
    async with agent(client, "ignores-rejection") as run:
        assert await run.prompt() == "end_turn"
    assert len(client.asked) == 1
    assert client.writes == [(str(workdir / "calc.py"), FIXED)]
    assert client.tool_updates("call_1")[-1].status == "completed"


@pytest.mark.slow  # an agent process each: `make stress` plays them (CI too)
async def test_unknown_update_names_a_call_never_started(workdir: Path) -> None:
    client = Client(workdir, answers=["allow"])
    async with agent(client, "unknown-update") as run:
        assert await run.prompt() == "end_turn"
    started = {u.tool_call_id for u in client.of(ToolCallStart)}
    assert started == {"call_1"}
    first, *_ = client.of(ToolCallProgress)
    assert first.tool_call_id == "call_999" and first.status == "completed"


@pytest.mark.parametrize(
    ("script", "said"),
    [("nope", "no script 'nope' (its scripts: model)"), ("model", "has no turns")],
)
def test_a_missing_script_or_one_without_turns_exits_2(
    tmp_path: Path, script: str, said: str
) -> None:
    scenario = scenario_with(tmp_path, '[[scripts.model.executor]]\nfinal = "done"\n')
    done = subprocess.run(
        [sys.executable, "-m", MODULE, str(scenario), script],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=WAIT_S,
    )
    assert done.returncode == 2 and done.stdout == ""
    assert said in done.stderr and str(scenario) in done.stderr


def test_the_agent_imports_no_ui_store_or_model_layer() -> None:
    probe = f"import sys, {MODULE}\nprint('\\n'.join(sorted(sys.modules)))\n"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    loaded = set(done.stdout.split())
    heavy = {"textual", "litellm", "mcp", "aiosqlite", "psycopg"}
    layers = {f"loopdeck.{layer}" for layer in ("store", "operator", "tui", "cli", "llm")}
    assert not loaded & (heavy | layers)


@pytest.mark.slow  # an agent process each: `make stress` plays them (CI too)
async def test_a_terminal_step_runs_through_the_clients_terminal(
    workdir: Path, tmp_path: Path
) -> None:
    scenario = scenario_with(
        tmp_path,
        """
        [[scripts.t.turns]]
        [[scripts.t.turns.steps]]
        tool = "Run the tests"
        kind = "execute"
        permission = true
        [scripts.t.turns.steps.terminal]
        command = "{python}"
        args = ["-m", "pytest"]
        cwd = "sub"
        env = { CI = "1" }
        output_byte_limit = 100
        """,
    )
    client = Client(workdir, answers=["allow"])
    async with agent(client, "t", scenario) as run:
        assert await run.prompt() == "end_turn"
    [(tool_call, _)] = client.asked  # asked first, naming the command it will run
    assert tool_call.raw_input == {"command": sys.executable, "args": ["-m", "pytest"]}
    (create, given), *rest = client.terminal_calls
    command, args, kwargs = given
    assert (create, command, args) == ("create", sys.executable, ["-m", "pytest"])
    assert kwargs["cwd"] == str(workdir / "sub") and kwargs["output_byte_limit"] == 100
    assert [(var.name, var.value) for var in kwargs["env"]] == [("CI", "1")]
    assert rest == [("wait", "term-7"), ("output", "term-7"), ("release", "term-7")]
    started, running, done = client.tool_updates("call_1")
    assert started.status == "in_progress" and started.content is None
    assert running.status == "in_progress" and running.content[0].terminal_id == "term-7"
    assert done.status == "failed"  # the command exited 1
    assert done.content[0].terminal_id == "term-7"
    assert done.content[1].content.text == "exit 1 (output truncated)\n1 failed"
