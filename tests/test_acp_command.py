"""`loopdeck acp --goal TEXT [--workdir DIR] [--check CMD] -- AGENT_CMD ARGS…` (issue 29): an
ACP agent (loopdeck's scripted one) on a folder of the user's, worked on in place, recorded as
any run; `--check` the goal check, and without it the operator's word on each turn (or, with
nobody to ask, an `ask_user` stop)."""

from __future__ import annotations

import shlex
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import Recorder
from store_helpers import last_json

from loopdeck.acp_env.kind import agent_name
from loopdeck.acp_env.unchecked_goal import parse_word
from loopdeck.cli import main
from loopdeck.core.approvals import Answer
from loopdeck.core.events import EventBus
from loopdeck.core.outcome import RunOutcome
from loopdeck.core.states import StopReason
from loopdeck.operator.launch import AcpTarget, RunOptions, prepare_run

AGENT = "loopdeck.acp_env.scripted_agent"
SCRIPTS = """
name = "acp-command"
goal = "(unused: loopdeck acp gives the goal)"

[[scripts.write.turns]]
[[scripts.write.turns.steps]]
plan = ["Write done.txt"]
[[scripts.write.turns.steps]]
tool = "Write done.txt"
kind = "edit"
input = { path = "done.txt" }
permission = true
[scripts.write.turns.steps.write]
path = "done.txt"
content = "done\\n"
[[scripts.write.turns.steps]]
message = "Wrote done.txt."
"""
NO_CHECK = "the agent ended its turn and no --check says whether the goal is met"


@pytest.fixture
def work(tmp_path: Path) -> Path:
    """The user's folder: no git, a file of theirs the agent leaves alone."""
    folder = tmp_path / "myproject"
    folder.mkdir()
    (folder / "notes.md").write_text("mine\n")
    return folder


@pytest.fixture
def agent(tmp_path: Path) -> list[str]:
    """The scripted agent's command, its script kept outside the user's folder."""
    scenario = tmp_path / "agent-scripts.toml"
    scenario.write_text(textwrap.dedent(SCRIPTS))
    return [sys.executable, "-m", AGENT, str(scenario), "write"]


def check_for(text: str, *, met_when: str) -> str:
    """A `--check` command line: met (exit 0) when `met_when` exists, else says `text`."""
    code = (
        "import pathlib, sys\n"
        f"sys.exit(0) if pathlib.Path({met_when!r}).exists() else (print({text!r}), sys.exit(1))"
    )
    return shlex.join([sys.executable, "-c", code])


# The fast tier's one end to end run (a few seconds: the agent's process and its imports).
def test_the_agent_works_in_the_folder_in_place_and_the_check_says_met(
    work: Path, agent: list[str], tmp_path: Path, cli: Any
) -> None:
    db = str(tmp_path / "s.db")
    check = check_for("done.txt is missing", met_when="done.txt")
    code, summary, err = cli(
        "acp", "--goal", "Write done.txt", "--workdir", str(work), "--check", check,
        "--headless", "--json", "--approve", "auto", "--db", db, "--run-id", "acp-one",
        "--", *agent,
    )  # fmt: skip
    assert code == 0, err
    assert summary is not None and summary["stop_reason"] == "goal_met", summary
    assert summary["env"] == "acp:myproject" and summary["model"] == "acp scripted_agent"
    assert summary["run_id"] == "acp-one"
    # Changed in place, and the folder is still there, the user's own file untouched.
    assert (work / "done.txt").read_text() == "done\n"
    assert (work / "notes.md").read_text() == "mine\n"
    assert sorted(p.name for p in work.iterdir()) == ["done.txt", "notes.md"]
    code, runs, _ = cli("runs", "--json", "--db", db)
    assert code == 0 and runs is not None
    [listed] = [run for run in runs if run["run_id"] == "acp-one"]
    assert listed["env"] == "acp:myproject" and listed["stop_reason"] == "goal_met"
    # The same id again is refused before anything runs or is written.
    again = ("acp", "--goal", "g", "--workdir", str(work), "--headless", "--approve", "deny")
    code, _, err = cli(*again, "--db", db, "--run-id", "acp-one", "--", *agent)
    assert code == 2 and "--run-id acp-one: " in err and "already holds a run" in err
    assert len(cli("runs", "--json", "--db", db)[1] or []) == 1


@pytest.mark.slow  # seconds: the agent's process and its imports, the check (each test here)
def test_a_failing_check_is_the_next_prompt_until_the_rounds_run_out(
    work: Path, agent: list[str], tmp_path: Path, cli: Any
) -> None:
    check = check_for("README.md is missing", met_when="README.md")
    code, summary, _ = cli(
        "acp", "--goal", "Write the README", "--workdir", str(work), "--check", check,
        "--headless", "--json", "--approve", "auto", "--max-rounds", "1",
        "--db", str(tmp_path / "s.db"), "--", *agent,
    )  # fmt: skip
    assert code == 1 and summary is not None
    assert summary["stop_reason"] == "round_limit", summary
    assert summary["findings"] == ["round 1: README.md is missing"]
    assert (work / "done.txt").exists()


@pytest.mark.slow  # two turns of the agent, two checks
async def test_a_failing_check_then_an_idle_turn_stalls(work: Path, agent: list[str]) -> None:
    check = shlex.split(check_for("README.md is missing", met_when="README.md"))
    outcome, rec = await _run(work, agent, check=check)
    assert outcome.stop_reason is StopReason.STALLED, outcome.detail
    verdicts = [(v.verdict, v.reasons) for v in rec.kinds("review_verdict")]
    assert verdicts[0] == ("fail", ["README.md is missing"])
    assert verdicts[1][0] == "stalled"


@pytest.mark.slow
def test_without_check_and_nobody_to_ask_the_run_stops_ask_user(
    work: Path, agent: list[str], tmp_path: Path, cli: Any
) -> None:
    code, summary, _ = cli(
        "acp", "--goal", "Write done.txt", "--workdir", str(work), "--json", "--approve", "auto",
        "--db", str(tmp_path / "s.db"), "--", *agent,
    )  # fmt: skip
    assert code == 1 and summary is not None
    assert (summary["stop_reason"], summary["detail"]) == ("ask_user", NO_CHECK)
    assert (work / "done.txt").exists()  # the turn's work stands: only the goal is unjudged


class Operator:
    """Answers the run's questions from a list, keeping what was asked."""

    def __init__(self, *answers: str) -> None:
        self.answers = list(answers)
        self.asked: list[str] = []

    async def answer(self, run_id: str, question_id: str, question: str) -> Answer:
        self.asked.append(question)
        return Answer(text=self.answers.pop(0), by="tester")


async def _run(
    work: Path, agent: list[str], operator: Operator | None = None, **target: Any
) -> tuple[RunOutcome, Recorder]:
    bus, rec = EventBus(), Recorder()
    bus.subscribe(rec)
    acp = AcpTarget(goal="Write done.txt", workdir=work, command=agent, **target)
    options = RunOptions(env="acp:test", approve="auto", acp=acp)
    prepared = prepare_run(options, bus=bus, answerer=operator)
    try:
        outcome = await prepared.runtime.run()
    finally:
        prepared.cleanup()
    assert work.is_dir()  # never the run's to remove
    return outcome, rec


@pytest.mark.slow
async def test_without_check_the_operators_accept_is_the_goal_met(
    work: Path, agent: list[str]
) -> None:
    operator = Operator("accept: done.txt is there")
    outcome, rec = await _run(work, agent, operator)
    assert outcome.stop_reason is StopReason.GOAL_MET, outcome.detail
    word = "accepted by tester: done.txt is there"
    assert word in outcome.detail and outcome.findings == [f"round 1: {word}"]
    [asked] = rec.kinds("question_asked")
    assert asked.question.startswith("The agent ended its turn; nothing checks the goal.")
    evidence = dict(asked.evidence)
    assert evidence["files changed this turn"] == "done.txt"
    assert evidence["the agent said"] == "Wrote done.txt."
    [verdict] = rec.kinds("review_verdict")
    assert (verdict.verdict, verdict.reasons) == ("pass", [word])


@pytest.mark.slow
async def test_without_check_words_are_the_next_prompt_and_stop_cancels(
    work: Path, agent: list[str]
) -> None:
    operator = Operator("", "Now write a README too", "stop")
    outcome, rec = await _run(work, agent, operator)
    assert outcome.stop_reason is StopReason.CANCELLED, outcome.detail
    assert "stopped by tester" in outcome.detail
    assert operator.asked[1].startswith("Nothing said.")  # an empty answer is asked again
    assert len(rec.kinds("model_called")) == 2  # the words made a second turn
    assert len(rec.kinds("question_asked")) == 3


@pytest.mark.parametrize(
    ("said", "word"),
    [
        ("accept", ("accept", "")),
        ("a", ("accept", "")),
        ("Accepted — the tests pass", ("accept", "the tests pass")),
        ("stop", ("stop", "")),
        ("S.", ("stop", "")),
        ("Stop using sed and edit the file", ("prompt", "Stop using sed and edit the file")),
        ("acceptance tests still fail", ("prompt", "acceptance tests still fail")),
        ("a test still fails", ("prompt", "a test still fails")),
        ("  ", ("?", "")),
    ],
)
def test_the_operators_word_is_read_as_accept_stop_or_the_next_prompt(
    said: str, word: tuple[str, str]
) -> None:
    assert parse_word(said) == word


@pytest.mark.parametrize(
    ("command", "name"),
    [
        (["python", "-m", "loopdeck.acp_env.scripted_agent", "x.toml", "solve"], "scripted_agent"),
        (["npx", "-y", "@agentclientprotocol/claude-agent-acp@0.101.0"], "claude-agent-acp"),
        (["npx", "-y", "@google/gemini-cli", "--experimental-acp"], "gemini-cli"),
        (["/opt/agents/my_agent.py", "--acp"], "my_agent"),
        (["codex-acp"], "codex-acp"),
        # a wrapper in front of it: `env` and its settings are not the agent
        (
            ["env", "HOME=/h", "IS_SANDBOX=1", "npx", "-y", "@anthropic-ai/claude-code@2.1.3"],
            "claude-code",
        ),
        (["/usr/bin/env", "-i", "codex-acp"], "codex-acp"),
    ],
)
def test_the_agent_is_named_by_its_command(command: list[str], name: str) -> None:
    assert agent_name(command) == f"acp {name}"


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--goal", "g", "--workdir", "{tmp}/absent", "--", "agent"],
         "--workdir {tmp}/absent: no such folder"),
        (["--goal", "g", "--workdir", "{tmp}/file", "--", "agent"],
         "--workdir {tmp}/file: not a folder"),
        (["--goal", "g"], "acp needs the agent's command after --"),
        (["--goal", "g", "--"], "acp needs the agent's command after --"),
        (["--goal", "g", "--", "no-such-agent", "--x"],
         "the agent's command no-such-agent: not found"),
        (["--", "agent"], "acp needs --goal TEXT"),
        (["--goal", " ", "--", "agent"], "acp needs --goal TEXT"),
    ],
)  # fmt: skip
def test_bad_input_is_one_line_and_exit_2(
    argv: list[str], said: str, tmp_path: Path, cli: Any
) -> None:
    (tmp_path / "file").write_text("")
    args = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    code, _, err = cli("acp", "--headless", *args)
    assert code == 2
    assert err.startswith(f"loopdeck: {said.replace('{tmp}', str(tmp_path))}")
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("flag", "said"),
    [
        (["--bogus"], "unrecognized arguments: --bogus"),
        (["--check", "'unclosed"], "argument --check: cannot be split"),
        (["--env", "NOVALUE"], "argument --env: must be KEY=VALUE"),
    ],
)
def test_a_bad_flag_is_exit_2_naming_it(
    flag: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["acp", "--goal", "g", *flag, "--", "agent"])
    assert exited.value.code == 2
    assert said in capsys.readouterr().err


@pytest.mark.slow  # a runner process, the store polled for the question
def test_loopdeck_answer_accepts_the_turn_of_a_waiting_headless_run(
    work: Path, agent: list[str], tmp_path: Path, cli: Any
) -> None:
    db = str(tmp_path / "s.db")
    runner = subprocess.Popen(
        [sys.executable, "-m", "loopdeck", "acp", "--goal", "Write done.txt", "--json",
         "--approve", "wait", "--workdir", str(work), "--db", db, "--", *agent],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert runner.stderr is not None
        run_id = runner.stderr.readline().split()[1]
        # The agent's write waits for its approval first, then the turn's question.
        deadline = time.monotonic() + 60
        while cli("approve", run_id, "c1", "--db", db)[0] != 0:
            assert time.monotonic() < deadline and runner.poll() is None
            time.sleep(0.05)
        while cli("answer", run_id, "accept: looks right", "--db", db)[0] != 0:
            assert time.monotonic() < deadline and runner.poll() is None
            time.sleep(0.05)
        out, _ = runner.communicate(timeout=60)
        summary = last_json(out)
        assert summary["stop_reason"] == "goal_met", summary
        [finding] = summary["findings"]
        assert finding.startswith("round 1: accepted by ") and finding.endswith(": looks right")
        assert (work / "done.txt").exists()
    finally:
        runner.kill()
        runner.wait()


@pytest.mark.slow  # the guardian's process
async def test_an_agent_that_cannot_start_leaves_no_stderr_file(
    work: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    temp = tmp_path / "temp"
    temp.mkdir()
    monkeypatch.setattr("tempfile.tempdir", str(temp))
    outcome, _ = await _run(work, [str(tmp_path / "no-such-agent")])
    assert outcome.stop_reason is StopReason.TOOL_FAILURE
    assert "no-such-agent" in outcome.detail and "did not start" in outcome.detail
    assert list(temp.iterdir()) == []
