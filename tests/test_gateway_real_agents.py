"""Real agents that never ask, under `loopdeck gateway` (issue 39), offline: Claude Code (the
`claude` binary from npm, `-p` with `--permission-mode bypassPermissions`) and an agent in the
OpenAI format written with the `openai` SDK (`agents/openai_tool_agent.py`, streamed), each
started by the real CLI in a folder worked on in place, its model calls going through the
gateway to a loopback upstream that plays a script and checks every request body as the API
would (`gateway_upstreams.py`, `openai_loopback.py`). The operator decides from another
terminal (`loopdeck approve|reject|cancel`), as a user would:

- a rejected write never lands, and the model is told the operator's reason: by the agent's
  next call, or, when the write was all the answer held, by the gateway asking it again;
- an approved one lands once; an edited one lands as the operator wrote it;
- a read repeated from one state is caught; a token cap stops the agent within one call;
- a stop or a kill leaves no process of the agent, a daemon its shell started included.

The upstream's key stays in loopdeck's environment: every request it gets carries it, never
the agent's token. Needs node and npx (Claude Code is fetched into npm's cache once).
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import pytest
from acp_agents import (
    NEEDS_NPX,
    RUN_TIMEOUT_S,
    STOPS,
    Runner,
    Scratch,
    daemons,
    end_survivors,
    events,
    gone_or_left,
    kinds,
    loopdeck,
    npm_cache,
    pending_call,
    processes_said,
    wait_until,
)
from gateway_upstreams import Blocks, BlocksLoopback
from loopback_server import Loopback, Seen, Text
from openai_loopback import Call, Calls, OpenAILoopback

pytestmark = [pytest.mark.slow, NEEDS_NPX]  # each run starts a real agent: 3-20 s

PACKAGE = "@anthropic-ai/claude-code@2.1.318"  # the build the ACP tests' adapter ships
OPENAI_AGENT = Path(__file__).parent / "agents" / "openai_tool_agent.py"
RUN_ID = "gateway-real"
UPSTREAM_KEYS = {"ANTHROPIC_API_KEY": "sk-ant-upstream-key", "OPENAI_API_KEY": "sk-upstream-key"}
NOTES = "the user's notes\n"
BY_MODEL, BY_OPERATOR = "written by the model\n", "written by the operator\n"
REASON = "out.txt is not yours to write, leave the folder as it is"
DAEMON_MARK = "sleep 6139"
DAEMON = f"trap '' HUP; setsid {DAEMON_MARK} >/dev/null 2>&1 </dev/null &"
GOAL = "Copy notes.txt to out.txt."
# The goal check, run in the folder: met once out.txt exists.
CHECK = shlex.join([
    sys.executable, "-c",
    "import pathlib, sys; sys.exit(0 if pathlib.Path('out.txt').exists()"
    " else print('out.txt is missing') or 1)",
])  # fmt: skip


# -- the agents ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Agent:
    """A real agent as the tests drive it: its command, its upstream's kind and model, and the
    tool calls its model makes in its own tools' words."""

    name: str
    model: str  # the upstream, a LiteLLM model name
    tools: tuple[str, ...] = ()  # `--tool NAME=read|write`
    key_name: str = "OPENAI_API_KEY"  # where loopdeck finds the upstream's key

    def command(self, home: Path, log: Path) -> list[str]:
        """The agent's command line: its HOME the scratch one (so its processes are found by
        it), its stdout and stderr into `log`."""
        head = ["env", f"HOME={home}", *self.environ()]
        return [*head, "sh", "-c", 'exec "$@" >"$0" 2>&1', str(log), *self.argv()]

    def environ(self) -> list[str]:
        return []

    def argv(self) -> list[str]:
        raise NotImplementedError

    def upstream(self, script: list[Any]) -> Loopback:
        raise NotImplementedError

    def key_sent(self, seen: Seen) -> str:
        raise NotImplementedError

    def read(self, work: Path, name: str) -> Any:
        raise NotImplementedError

    def write(self, work: Path, name: str, content: str) -> Any:
        raise NotImplementedError

    def write_input(self, work: Path, name: str, content: str) -> dict[str, Any]:
        raise NotImplementedError

    def shell(self, command: str) -> Any:
        raise NotImplementedError

    def together(self, *calls: Any) -> Any:
        raise NotImplementedError


class ClaudeCode(Agent):
    def environ(self) -> list[str]:
        # IS_SANDBOX: as root, Claude Code refuses bypassPermissions outside a sandbox.
        return [
            "IS_SANDBOX=1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1", "DISABLE_AUTOUPDATER=1",
            f"npm_config_cache={npm_cache()}", "npm_config_update_notifier=false",
        ]  # fmt: skip

    def argv(self) -> list[str]:
        return ["npx", "-y", PACKAGE, "-p", GOAL, "--permission-mode", "bypassPermissions"]

    def upstream(self, script: list[Any]) -> Loopback:
        return BlocksLoopback(script)

    def key_sent(self, seen: Seen) -> str:
        headers = {k.lower(): v for k, v in seen.headers.items()}
        return headers.get("x-api-key") or headers.get("authorization", "").removeprefix("Bearer ")

    def read(self, work: Path, name: str) -> Any:
        return Call("Read", {"file_path": str(work / name)}, f"Let me read {name}.")

    def write(self, work: Path, name: str, content: str) -> Any:
        return Call("Write", self.write_input(work, name, content))

    def write_input(self, work: Path, name: str, content: str) -> dict[str, Any]:
        return {"file_path": str(work / name), "content": content}

    def shell(self, command: str) -> Any:
        return Call("Bash", {"command": command, "description": "Start the server"})

    def together(self, *calls: Any) -> Any:
        return Blocks(tuple(calls))


@dataclass(frozen=True)
class OpenAISdkAgent(Agent):
    stream: bool = True

    def argv(self) -> list[str]:
        return [sys.executable, str(OPENAI_AGENT), *(["--stream"] if self.stream else []), GOAL]

    def upstream(self, script: list[Any]) -> Loopback:
        return OpenAILoopback(script)

    def key_sent(self, seen: Seen) -> str:
        headers = {k.lower(): v for k, v in seen.headers.items()}
        return headers.get("authorization", "").removeprefix("Bearer ")

    def read(self, work: Path, name: str) -> Any:
        return Call("read_file", {"path": name})

    def write(self, work: Path, name: str, content: str) -> Any:
        return Call("write_file", self.write_input(work, name, content))

    def write_input(self, work: Path, name: str, content: str) -> dict[str, Any]:
        return {"path": name, "content": content}

    def shell(self, command: str) -> Any:
        return Call("run_command", {"command": command})

    def together(self, *calls: Any) -> Any:
        return Calls(tuple(calls))


CLAUDE = ClaudeCode("claude-code", "anthropic/claude-loopback", key_name="ANTHROPIC_API_KEY")
OPENAI = OpenAISdkAgent("openai-sdk", "openai/gpt-loopback", ("list_files=read",))
OPENAI_WHOLE = OpenAISdkAgent("openai-sdk-unstreamed", OPENAI.model, OPENAI.tools, stream=False)


@pytest.fixture(params=[CLAUDE, OPENAI], ids=lambda agent: agent.name)
def agent(request: pytest.FixtureRequest) -> Agent:
    return request.param  # type: ignore[no-any-return]


# -- a gateway run ---------------------------------------------------------------------------------
class Gateway(Runner):
    """`loopdeck gateway ... --headless --json -- AGENT` in a subprocess, its stderr in a file."""

    def __init__(self, scratch: Scratch, agent: Agent, api: Loopback, approve: str, *extra: str):
        self.scratch = scratch
        self.errfile = scratch.root / "run.err"
        self.work = scratch.root / "work"
        self.log = scratch.root / "agent.log"
        tools = [arg for tool in agent.tools for arg in ("--tool", tool)]
        command = [
            sys.executable, "-m", "loopdeck", "gateway", "--goal", GOAL, "--workdir",
            str(self.work), "--check", CHECK, "--model", agent.model, "--api-base", api.url,
            *tools, "--headless", "--json", "--approve", approve, "--db", str(scratch.db),
            "--run-id", RUN_ID, *extra,
            "--", *agent.command(scratch.home, self.log),
        ]  # fmt: skip
        with self.errfile.open("w") as err:
            self.proc = subprocess.Popen(
                command, stdout=subprocess.PIPE, stderr=err, text=True,
                env={**scratch.environ(), **UPSTREAM_KEYS},
            )  # fmt: skip

    def agent_said(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else "(nothing)"


@dataclass
class Played:
    """A gateway run, ended: its outcome, the upstream, the folder, what the agent printed, the
    agent's processes left, and what to read when an assertion fails (`why`)."""

    agent: Agent
    gateway: Gateway
    api: Loopback
    outcome: dict[str, Any]
    left: list[int]
    why: str = field(init=False)

    def __post_init__(self) -> None:
        shown = {k: self.outcome.get(k) for k in ("stop_reason", "detail", "findings", "calls")}
        requests = [
            f"{s.method} {s.path}{' (side)' if s.side else ''}: {_short(s.body)}"
            for s in self.api.seen
        ]
        self.why = (
            f"\noutcome: {json.dumps(shown)[:2000]}\nloopdeck said: {self.gateway.stderr()[-2000:]}"
            f"\nthe agent said: {self.gateway.agent_said()[-2000:]}"
            f"\nupstream refused: {self.api.problems()}\nupstream got:\n" + "\n".join(requests)
        )

    @property
    def work(self) -> Path:
        return self.gateway.work

    @cached_property
    def found(self) -> list[dict[str, Any]]:
        return events(RUN_ID, self.gateway.scratch.db)

    def main_requests(self) -> list[Seen]:
        return self.api.main_requests()

    def upstream_clean(self) -> None:
        """Every request the upstream got is one the API takes, with loopdeck's key for it."""
        assert self.api.problems() == [], self.why
        key = UPSTREAM_KEYS[self.agent.key_name]
        assert {self.agent.key_sent(s) for s in self.api.seen} == {key}, self.why


def _short(body: dict[str, Any], width: int = 600) -> str:
    """A request's conversation, its last two turns."""
    turns = body.get("messages") or body.get("input") or []
    text = json.dumps(turns[-2:] if isinstance(turns, list) else turns)
    return text if len(text) <= width else text[: width - 1] + "…"


def workspace(root: Path) -> Path:
    work = root / "work"
    work.mkdir()
    (work / "notes.txt").write_text(NOTES)
    return work


@contextmanager
def gateway_run(
    agent: Agent, tmp_path: Path, api: Loopback, approve: str, *extra: str
) -> Iterator[Gateway]:
    """The gateway on the agent while `api` (entered here) plays its script; interrupted at
    the end if still going, the agent's processes ended."""
    workspace(tmp_path)
    with api:
        scratch = Scratch(tmp_path, api.url)
        runner = Gateway(scratch, agent, api, approve, *extra)
        try:
            yield runner
        finally:
            runner.end()
            end_survivors(scratch.home)


def play(
    agent: Agent,
    tmp_path: Path,
    script: list[Any],
    approve: str,
    *extra: str,
    operator: Callable[[Gateway], None] | None = None,
) -> Played:
    """A whole gateway run, `operator` acting from another terminal while it goes."""
    api = agent.upstream(script)
    with gateway_run(agent, tmp_path, api, approve, *extra) as gateway:
        if operator is not None:
            operator(gateway)
        outcome = gateway.outcome()
        left = gone_or_left(gateway.scratch.home)
    return Played(agent, gateway, api, outcome, left)


def decide(*how: str, args: dict[str, Any] | None = None) -> Callable[[Gateway], None]:
    """The operator's decision on the run's first held write: `approve` or `reject` with
    `how`'s options, or `approve --args ARGS` (an edit). The pending write is checked to be
    the one the model sent."""

    def operator(gateway: Gateway) -> None:
        pending = pending_call(gateway.scratch, RUN_ID, gateway)
        extra = ("--args", json.dumps(args)) if args is not None else ()
        done = loopdeck(*how[:1], RUN_ID, pending["call_id"], *how[1:], *extra,
                        "--db", str(gateway.scratch.db), timeout=60)  # fmt: skip
        assert done.returncode == 0, f"{how[0]} said: {done.stderr}{done.stdout}"

    return operator


def in_request(seen: Seen, text: str) -> bool:
    return text in json.dumps(seen.body)


# -- the cases -----------------------------------------------------------------------------------
@pytest.mark.parametrize("agent", [CLAUDE, OPENAI, OPENAI_WHOLE], ids=lambda agent: agent.name)
def test_an_approved_write_lands_once(agent: Agent, tmp_path: Path) -> None:
    work = tmp_path / "work"
    script = [agent.read(work, "notes.txt"), agent.write(work, "out.txt", BY_MODEL), Text("Done.")]
    run = play(agent, tmp_path, script, "wait", operator=decide("approve"))
    run.upstream_clean()
    assert run.outcome["stop_reason"] == "goal_met", run.why
    assert (run.work / "out.txt").read_text() == BY_MODEL, run.why
    # Three model calls, each once: the read, the write, the last word.
    assert len(run.main_requests()) == 3, run.why
    [asked] = kinds(run.found, "approval_requested")
    assert asked["args"] == agent.write_input(work, "out.txt", BY_MODEL), run.why
    [decided] = kinds(run.found, "approval_decided")
    assert decided["call_id"] == asked["call_id"] and decided["approved"] is True, run.why
    assert run.left == [], run.why + f"\nleft: {processes_said(run.left)}"


def test_a_rejected_write_never_lands_and_the_model_is_told_why(
    agent: Agent, tmp_path: Path
) -> None:
    """The model reads and writes in one answer: the read is released, the write is held and
    rejected; the agent runs the read only, and its next call tells the model the reason."""
    work = tmp_path / "work"
    both = agent.together(agent.read(work, "notes.txt"), agent.write(work, "out.txt", BY_MODEL))
    script = [both, Text("I was not allowed to write out.txt.")]
    run = play(agent, tmp_path, script, "wait", operator=decide("reject", "--reason", REASON))
    run.upstream_clean()
    assert not (run.work / "out.txt").exists(), run.why
    assert sorted(p.name for p in run.work.iterdir()) == ["notes.txt"], run.why
    first, after = run.main_requests()
    assert not in_request(first, REASON), run.why
    assert in_request(after, REASON), run.why  # the model is told
    assert in_request(after, NOTES.strip()), run.why  # and the read's result
    [decided] = kinds(run.found, "approval_decided")
    assert decided["approved"] is False, run.why
    assert run.outcome["stop_reason"] == "stalled", run.why
    assert run.left == [], run.why + f"\nleft: {processes_said(run.left)}"


def test_a_write_rejected_alone_is_told_to_the_model_by_the_gateway(
    agent: Agent, tmp_path: Path
) -> None:
    """The answer holds the write alone: released as text, `claude -p` would end on it and the
    model would never hear why. The gateway asks the model again itself, the reason as the
    write's result; the agent gets the model's follow-up (the gateway's words first) and ends."""
    work = tmp_path / "work"
    after = "Understood: I will leave out.txt alone."
    script = [agent.write(work, "out.txt", BY_MODEL), Text(after)]
    run = play(agent, tmp_path, script, "wait", operator=decide("reject", "--reason", REASON))
    run.upstream_clean()
    assert not (run.work / "out.txt").exists(), run.why
    first, told = run.main_requests()  # the second asked by the gateway, not the agent
    assert not in_request(first, REASON), run.why
    assert in_request(told, f"Their reason: {REASON}"), run.why  # the model is told
    assert after in run.gateway.agent_said(), run.why  # the model's follow-up reached the agent
    [decided] = kinds(run.found, "approval_decided")
    assert decided["approved"] is False, run.why
    assert run.outcome["model_calls"] == 2, run.why  # counted as any model call
    assert run.outcome["stop_reason"] == "stalled", run.why
    assert run.left == [], run.why + f"\nleft: {processes_said(run.left)}"


def test_an_edited_write_lands_as_the_operator_wrote_it(agent: Agent, tmp_path: Path) -> None:
    work = tmp_path / "work"
    edited = agent.write_input(work, "out.txt", BY_OPERATOR)
    script = [agent.write(work, "out.txt", BY_MODEL), Text("Done.")]
    run = play(agent, tmp_path, script, "wait", operator=decide("approve", args=edited))
    run.upstream_clean()
    assert (run.work / "out.txt").read_text() == BY_OPERATOR, run.why
    assert run.outcome["stop_reason"] == "goal_met", run.why
    [asked] = kinds(run.found, "approval_requested")
    [decided] = kinds(run.found, "approval_decided")
    assert asked["args"] == agent.write_input(work, "out.txt", BY_MODEL), run.why
    assert decided["approved"] is True and decided["args"] == edited, run.why
    # What the agent ran is what the model hears it ran.
    assert in_request(run.main_requests()[-1], BY_OPERATOR.strip()), run.why


def test_a_read_repeated_from_one_state_is_caught(agent: Agent, tmp_path: Path) -> None:
    work = tmp_path / "work"
    read = agent.read(work, "notes.txt")
    run = play(agent, tmp_path, [read, read, Text("Read it twice.")], "auto")
    run.upstream_clean()
    reads = [e for e in kinds(run.found, "call_proposed") if e["tool"].lower().startswith("read")]
    assert len(reads) >= 2 and reads[0]["fingerprint"] == reads[1]["fingerprint"], run.why
    [tripped, *_] = kinds(run.found, "guard_tripped")
    assert tripped["call_id"] == reads[1]["call_id"], run.why
    # The agent never got the repeat to run: its answer held only the gateway's text, and the
    # agent ended on it (a third call would have been played the script's last word).
    assert len(run.main_requests()) == 2, run.why
    assert run.outcome["stop_reason"] == "no_progress", run.why
    assert run.left == [], run.why + f"\nleft: {processes_said(run.left)}"


def test_a_token_cap_stops_the_agent_within_one_call(agent: Agent, tmp_path: Path) -> None:
    """Each upstream answer costs 150 tokens (120 in, 30 out): under a cap of 200 the second
    call crosses it, and the third is refused with an error the agent shows, naming the cap."""
    work = tmp_path / "work"
    script = [agent.read(work, name) for name in ("notes.txt", "a.txt", "b.txt", "c.txt")]
    run = play(agent, tmp_path, [*script, Text("Read them.")], "auto", "--max-tokens", "200")
    run.upstream_clean()
    assert len(run.main_requests()) == 2, run.why
    assert run.outcome["stop_reason"] == "token_limit", run.why
    assert "200" in run.outcome["detail"], run.why
    said = run.gateway.agent_said()
    assert "token" in said.lower() and "200" in said, run.why  # the agent was told the cap
    assert run.left == [], run.why + f"\nleft: {processes_said(run.left)}"


@STOPS
def test_a_stop_leaves_no_process_of_the_agent(
    agent: Agent, tmp_path: Path, how: str, stop_reason: str
) -> None:
    """The agent's shell starts a daemon in a session of its own, then its model never
    answers; `loopdeck HOW` from another terminal ends the run and every process of the agent."""
    api = agent.upstream([agent.shell(DAEMON), agent.read(tmp_path / "work", "notes.txt")])
    api.hang_from = 1
    with gateway_run(agent, tmp_path, api, "auto") as gateway:
        home = gateway.scratch.home
        wait_until("the model asked after the shell", lambda: api.hanging.is_set() or None)
        assert daemons(home, DAEMON_MARK), (
            f"no daemon started; agent: {gateway.agent_said()}; run: {gateway.stderr()}"
        )
        done = loopdeck(*how.split(), RUN_ID, "--db", str(gateway.scratch.db), timeout=60)
        assert done.returncode == 0, done.stderr
        outcome = gateway.outcome(timeout=RUN_TIMEOUT_S)
        left = gone_or_left(home)
    run = Played(agent, gateway, api, outcome, left)
    assert outcome["stop_reason"] == stop_reason, run.why
    assert left == [], run.why + f"\nleft: {processes_said(left)}"
