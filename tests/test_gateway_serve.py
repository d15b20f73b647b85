"""`loopdeck gateway serve` and `loopdeck gateway token`: one gateway for agents started
elsewhere, each client token one run, recorded as any other. A token is the run's settings
signed with the user's key: one not signed with it, or whose run has ended, is let in nowhere.
A served run ends once its agent is quiet after an answer with no tool use; then its goal
check decides."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from anthropic_loopback import AnthropicLoopback
from gateway_clients import Client, Refused
from gateway_helpers import WAIT_S
from loopback_server import Call, Text

from loopdeck.cli import gateway_serve
from loopdeck.cli.gateway_command import own_command
from loopdeck.cli.gateway_serve import key_path, serve
from loopdeck.cli.parser import build_parser

MODEL = "anthropic/claude-loop"


class Signals:
    """A stop signal the test sends."""

    def __init__(self) -> None:
        self.stop: Any = None

    def aim(self, on_stop: Any) -> None:
        self.stop = on_stop


def parsed(*argv: str) -> Any:
    words = ["gateway", *argv]
    args = build_parser().parse_args(words)
    own = own_command(args, words)
    assert own is not None
    return args, own


@pytest.fixture(autouse=True)
def upstream_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-upstream-anthropic")


async def test_a_token_is_one_served_run_recorded_as_any_other(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import sqlite3

    work = tmp_path / "work"
    work.mkdir()
    db = str(tmp_path / "s.db")
    stored_when_said: list[list[str]] = []
    say = gateway_serve._say

    def said(text: str) -> None:  # what the store holds as the run is announced
        if "started for its token" in text:
            with sqlite3.connect(db) as store:
                rows = store.execute("SELECT run_id FROM runs").fetchall()
            stored_when_said.append([row[0] for row in rows])
        say(text)

    monkeypatch.setattr(gateway_serve, "_say", said)
    check = f"{sys.executable} -c \"import os, sys; sys.exit(not os.path.exists('done.txt'))\""
    write = Call("Write", {"file_path": "done.txt", "content": "done\n"})
    with AnthropicLoopback([write, Text("Done.")]) as upstream:
        args, token_command = parsed(
            "token", "--goal", "Write done.txt", "--workdir", str(work), "--check", check,
            "--model", MODEL, "--api-base", upstream.url, "--approve", "auto",
            "--run-id", "served-one", "--idle", "0.2",
        )  # fmt: skip
        assert token_command(args) == 0
        token = capsys.readouterr().out.strip()
        assert key_path().stat().st_mode & 0o777 == 0o600  # the user's key, theirs alone
        serve_args, _ = parsed("serve", "--db", db)
        signals, address = Signals(), asyncio.get_running_loop().create_future()
        serving = asyncio.ensure_future(serve(serve_args, signals, address.set_result))
        url = await address
        told = {"ANTHROPIC_BASE_URL": url, "ANTHROPIC_API_KEY": token}
        client = Client(told, "messages", stream=True)
        client.user("write done.txt")
        answer = await client.ask()
        (work / "done.txt").write_text("done\n")  # the agent, elsewhere, runs it
        client.results({answer.uses[0][0]: "wrote done.txt"})
        assert (await client.ask()).text == "Done."
        # Quiet after an answer with no tool use: the run ends, and its token with it.
        recorded = await _stopped(capsys, db)
        again = Client(told, "messages", stream=False)
        again.user("anything more?")
        with pytest.raises(Refused) as ended:
            await again.ask()
        assert (
            ended.value.status == 400 and "this token was made for has ended" in ended.value.message
        )
        # Another token for the same run id: its run cannot start, and is never announced.
        args, token_command = parsed(
            "token", "--goal", "Write it again", "--workdir", str(work), "--model", MODEL,
            "--api-base", upstream.url, "--approve", "auto", "--run-id", "served-one",
        )  # fmt: skip
        assert token_command(args) == 0
        reused = capsys.readouterr().out.strip()
        with pytest.raises(Refused) as unstarted:
            await Client({**told, "ANTHROPIC_API_KEY": reused}, "messages", False).ask()
        assert unstarted.value.status == 400 and "could not start" in unstarted.value.message
        logged = capsys.readouterr().err
        assert "run served-one could not start" in logged and "started for" not in logged
        forged = token[:-3] + ("AAA" if not token.endswith("AAA") else "BBB")
        with pytest.raises(Refused) as refused:
            await Client({**told, "ANTHROPIC_API_KEY": forged}, "messages", False).ask()
        assert refused.value.status == 401
        signals.stop("test")
        await serving
    assert recorded == ("served-one", "gateway:served", "goal_met")
    assert stored_when_said == [["served-one"]]  # announced once the store had it


async def _stopped(capsys: pytest.CaptureFixture[str], db: str) -> tuple[str, str, str]:
    """The served run as the store has it, once it has stopped."""
    from loopdeck.cli import main

    loop = asyncio.get_running_loop()
    end = loop.time() + WAIT_S
    while loop.time() < end:
        capsys.readouterr()
        assert await asyncio.to_thread(main, ["runs", "--json", "--db", db]) == 0
        [run] = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
        if run["stop_reason"]:
            return run["run_id"], run["env"], run["stop_reason"]
        await asyncio.sleep(0.05)
    raise AssertionError(f"the served run did not stop within {WAIT_S:g} s")


def test_a_token_needs_its_goal_model_and_approve_mode(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args, token_command = parsed("token", "--goal", "g", "--workdir", str(tmp_path))
    assert token_command(args) == 2
    assert "gateway token needs --model MODEL" in capsys.readouterr().err
    args, token_command = parsed("token", "--goal", "g", "--model", MODEL)
    assert token_command(args) == 2
    assert "needs --approve auto|deny|wait" in capsys.readouterr().err
    for model, said in (
        ("scripted", "`scripted` is loopdeck's own loop's"),
        ("nosuchmodel", "--model nosuchmodel: LiteLLM knows no provider for it"),
    ):  # a token whose run would be refused at its start is not issued
        args, token_command = parsed("token", "--goal", "g", "--model", model, "--approve", "auto")
        assert token_command(args) == 2
        assert said in capsys.readouterr().err


def test_a_tokens_model_is_checked_before_its_approve_mode(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A model its served run would refuse at the first call is the problem said, not the
    missing approve mode a user would add only to be told of the model next."""
    for model, said in (
        ("scripted", "`scripted` is loopdeck's own loop's"),
        ("nosuchmodel", "--model nosuchmodel: LiteLLM knows no provider for it"),
    ):
        args, token_command = parsed("token", "--goal", "g", "--model", model)
        assert token_command(args) == 2
        err = capsys.readouterr().err
        assert said in err and "--approve" not in err


def test_a_token_whose_upstream_lacks_its_key_here_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The key is `serve`'s to have (it may run elsewhere): the token is made, and the user
    told that a `serve` without it refuses the run at its first call."""
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    args, token_command = parsed(
        "token", "--goal", "g", "--model", MODEL, "--approve", "auto", "--workdir", str(tmp_path)
    )
    assert token_command(args) == 0
    out, err = capsys.readouterr()
    assert out.startswith("ldg-")
    assert f"{MODEL} needs ANTHROPIC_API_KEY" in err and "refused at its first call" in err


NO_WRITES = """\
[[rule]]
id = "no-writes"
effect = "deny"
when = 'call.tool == "Write"'
message = "this folder is read-only"
"""


def test_a_token_refuses_a_policy_its_run_would_refuse_and_serve_takes_none(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = tmp_path / "broken.toml"
    broken.write_text("[[rule]]\nid = 1\n")
    for policy, said in ((tmp_path / "none.toml", "no such file"), (broken, "broken.toml")):
        args, token_command = parsed(
            "token", "--goal", "g", "--model", MODEL, "--approve", "auto",
            "--workdir", str(tmp_path), "--policy", str(policy),
        )  # fmt: skip
        assert token_command(args) == 2
        err = capsys.readouterr().err
        assert said in err and not capsys.readouterr().out, err
    args, serve_command = parsed("serve", "--policy", str(broken))
    assert serve_command(args) == 2
    assert "--policy: it belongs to `loopdeck gateway token`" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (
            ["--goal", "g", "--approve", "auto", "serve", "--max-tool-calls", "3"],
            "gateway serve does not take --goal, --approve, --max-tool-calls: they belong to"
            " `loopdeck gateway token`",
        ),
        (["serve", "--theme", "dark"], "--theme: it belongs to neither"),
        (
            ["token", "--goal", "g", "--port", "8080", "--env", "A=b"],
            "gateway token does not take --port: it belongs to `loopdeck gateway serve`;"
            " --env: it belongs to neither",
        ),
        # Given by the words, whatever their value: a default's value is given all the same.
        (["serve", "--workdir", "."], "gateway serve does not take --workdir: it belongs to"),
        (["--workdir=.", "serve"], "gateway serve does not take --workdir: it belongs to"),
        (["--work", ".", "serve"], "gateway serve does not take --workdir: it belongs to"),
        (["token", "--goal", "g", "--port", "0"], "gateway token does not take --port"),
    ],
)
def test_a_flag_serve_or_token_does_not_carry_out_is_refused_by_name(
    argv: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """`serve` runs each token's run as its token says, so a run's setting given to `serve`
    (before or after the word) would be dropped: refused by name, nothing served or made."""
    args, command = parsed(*argv)
    assert command not in (gateway_serve.run_serve, gateway_serve.run_token)
    assert command(args) == 2
    out, err = capsys.readouterr()
    assert said in err and not out, err


def test_the_command_line_says_which_flags_serve_was_given(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`loopdeck gateway serve --workdir .`: the folder is the default's, and still a flag
    `serve` does not carry out (a token carries its run's folder): refused, exit 2."""
    from loopdeck.cli import main

    assert main(["gateway", "serve", "--workdir", "."]) == 2
    out, err = capsys.readouterr()
    assert "gateway serve does not take --workdir" in err and not out, err


def test_what_serve_carries_out_is_taken() -> None:
    _, command = parsed("serve", "--port", "0", "--db", "s.db", "--headless")
    assert command is gateway_serve.run_serve


async def test_a_tokens_run_is_decided_under_the_policy_it_was_made_with(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import sqlite3

    work = tmp_path / "work"
    work.mkdir()
    policy = tmp_path / "policy.toml"
    policy.write_text(NO_WRITES)
    db = str(tmp_path / "s.db")
    write = Call("Write", {"file_path": "done.txt", "content": "done\n"})

    def token_for(run_id: str) -> str:
        args, token_command = parsed(
            "token", "--goal", "Write done.txt", "--workdir", str(work), "--model", MODEL,
            "--api-base", upstream.url, "--approve", "auto", "--run-id", run_id, "--idle", "0.2",
            "--policy", str(policy),
        )  # fmt: skip
        assert token_command(args) == 0
        return capsys.readouterr().out.strip()

    with AnthropicLoopback([write, Text("Done."), write]) as upstream:
        kept, edited = token_for("kept"), token_for("edited")
        serve_args, _ = parsed("serve", "--db", db)
        signals, address = Signals(), asyncio.get_running_loop().create_future()
        serving = asyncio.ensure_future(serve(serve_args, signals, address.set_result))
        url = await address
        client = Client({"ANTHROPIC_BASE_URL": url, "ANTHROPIC_API_KEY": kept}, "messages", False)
        client.user("write done.txt")
        answer = await client.ask()
        assert answer.uses == [] and "this folder is read-only" in answer.text  # denied
        assert (await _stopped(capsys, db))[0] == "kept"
        policy.write_text(NO_WRITES.replace('"deny"', '"allow"'))  # edited since its token
        late = Client({"ANTHROPIC_BASE_URL": url, "ANTHROPIC_API_KEY": edited}, "messages", False)
        late.user("write done.txt")
        with pytest.raises(Refused):
            await late.ask()
        signals.stop("test")
        await serving
    with sqlite3.connect(db) as store:
        kinds = [row[0] for row in store.execute("SELECT kind FROM events WHERE run_id='kept'")]
        ran = store.execute("SELECT run_id FROM runs").fetchall()
    assert "policy_in_force" in kinds and ran == [("kept",)]
    assert not (work / "done.txt").exists()
