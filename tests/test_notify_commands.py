"""The command a push carries decides from any terminal: its store by an absolute path (a
PostgreSQL URL never with its password), said alone when the push has no link and after
"or:" when it has one; run from another folder, it decides the run's write."""

from __future__ import annotations

import asyncio
import re
import shlex
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from notify_receivers import webhook

from loopdeck.core.events import ApprovalRequested, RunStarted
from loopdeck.operator.notifications import Notifier
from loopdeck.operator.notify_config import NotifySettings
from loopdeck.operator.push_channels import Channels
from loopdeck.operator.push_words import Asked, RunAbout, push_text
from loopdeck.store.base import Location

RUN = "r1"


def _pushed_body(store: Location) -> str:
    """The body of a push of one write, made as a run recorded in `store` makes it."""
    now, clock = datetime.now(UTC), [0.0]
    with webhook() as (hook, hooked):
        settings = NotifySettings((hook,), after_s=30.0)
        notifier = Notifier(settings, Channels(settings.urls), clock=lambda: clock[0],
                            inline=True, store_of=lambda: store)  # fmt: skip
        notifier.take(RunStarted(run_id=RUN, env="order_support", script="solve", model="m",
                                 mode="react", goal="g", budget={}))  # fmt: skip
        notifier.take(ApprovalRequested(
            run_id=RUN, call_id="c1", tool="write_file", args={}, args_sha256="0" * 64,
            state_hash="s" * 16, fingerprint="fp", plan_step=None, requested_at=now,
            expires_at=now + timedelta(seconds=300),
        ))  # fmt: skip
        clock[0] = 30.0
        notifier.tick()
        return str(hooked.wait_for(1)[0]["body"]["message"])


def test_a_push_says_the_store_so_its_command_runs_from_any_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    body = _pushed_body(Path("runs.db"))  # `--db runs.db`, relative
    assert f"loopdeck approve {RUN} c1 --db {tmp_path.resolve() / 'runs.db'}  (or:" in body
    url = "postgresql://me:hunter22@db.lan:5432/loopdeck?sslmode=require&password=hunter22"
    body = _pushed_body(url)
    assert "--db 'postgresql://me@db.lan:5432/loopdeck?sslmode=require'" in body
    assert "hunter22" not in body


def test_a_push_says_or_before_the_command_only_after_a_link() -> None:
    run = RunAbout("r1", "env/solve", "/tmp/runs.db")
    until = datetime.now(UTC) + timedelta(minutes=5)
    alone = Asked("c3", "approval", "approve write_file (write)", until)
    linked = Asked("c4", "approval", "approve write_file (write)", until, link="https://box/d/x")
    _, body = push_text(run, [alone, linked], content=False, secrets={})
    lines = [line.strip() for line in body.splitlines()]
    command = "loopdeck approve r1 {} --db /tmp/runs.db  (or: loopdeck reject … --reason TEXT)"
    assert f"decide from any terminal: {command.format('c3')}" in lines
    assert lines[lines.index("decide: https://box/d/x") + 1] == f"or: {command.format('c4')}"
    assert sum(line.startswith("or:") for line in lines) == 1  # after the link, only


async def test_the_command_a_push_carries_decides_from_another_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real run recorded in `--db runs.db`, relative: the command its push carries, run from
    another folder, approves the write, and the run ends with its goal met."""
    from loopdeck.cli.runs import run_recorded_headless
    from loopdeck.operator.launch import RunOptions

    (tmp_path / "run").mkdir()
    (elsewhere := tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "run")
    with webhook() as (hook, hooked):
        options = RunOptions(env="order_support", script="solve", approve="wait",
                             notify=NotifySettings((hook,), after_s=0.3))  # fmt: skip
        run = asyncio.create_task(run_recorded_headless(options, Path("runs.db")))
        while not len(hooked):
            assert not run.done(), run.result()
            await asyncio.sleep(0.05)
        message = hooked.items[0]["body"]["message"]
        said = re.search(r"(?:or|decide from any terminal): (loopdeck approve .+?)  \(or:", message)
        assert said is not None, message
        decide = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "loopdeck", *shlex.split(said.group(1))[1:], cwd=elsewhere,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        out, err = await decide.communicate()
        assert decide.returncode == 0, (out + err).decode()
        outcome = await asyncio.wait_for(run, 60)
    assert outcome.stop_reason.value == "goal_met"
