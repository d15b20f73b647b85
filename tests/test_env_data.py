"""A snapshot is a dict of JSON data: what the run hashes and records is what the env returned.
One that is not (an object, a set, a date, NaN, a list) stops the run `crashed`, recorded,
naming where, in `run` and `check` alike; and the writer never loses a batch (nor its spill)
to an event that cannot be made JSON."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path
from types import SimpleNamespace

import pytest
from conftest import SAMPLES

SNAPSHOT = '        return {"db_url": self.config["db_url"], "replicas": self.replicas,'
# The bad value only once the service is scaled to 3: the third read of the `solve` script.
LATE = '        return {**({"obj": object()} if self.replicas == 3 else {}), "db_url": self.config["db_url"], "replicas": self.replicas,'  # noqa: E501


def _user_env(tmp_path: Path, old: str, new: str) -> Path:
    dest = tmp_path / "mine"
    shutil.copytree(SAMPLES / "service_outage", dest, ignore=shutil.ignore_patterns("__py*"))
    text = (dest / "scenario.toml").read_text()
    (dest / "scenario.toml").write_text(
        text.replace("args = { seconds = 15 }", "args = { seconds = 1 }")
    )
    env_py = dest / "env.py"
    text = env_py.read_text()
    assert old in text
    env_py.write_text(text.replace(old, new, 1))
    return dest


def _snapshot_line(env: Path) -> int:
    lines = (env / "env.py").read_text().splitlines()
    return next(n for n, line in enumerate(lines, 1) if "def snapshot(self)" in line)


def test_a_late_snapshot_that_is_not_json_data_stops_the_run_recorded(cli, tmp_path) -> None:
    env = _user_env(tmp_path, SNAPSHOT, LATE)
    db = tmp_path / "s.db"
    code, done, err = cli("run", str(env), "--script", "solve", "--headless", "--json",
                          "--db", str(db))  # fmt: skip
    said = (
        'snapshot() returned a dict that is not JSON data: ["obj"] is of type object'
        f" (env.py:{_snapshot_line(env)}, in snapshot)"
    )
    assert done is not None, err  # the JSON line is printed
    assert (done["stop_reason"], done["detail"]) == ("crashed", said)
    assert code != 0
    with sqlite3.connect(db) as con:
        kinds = [k for (k,) in con.execute("SELECT kind FROM events ORDER BY seq")]
        stopped = con.execute("SELECT body FROM events WHERE kind = 'run_stopped'").fetchone()
    assert kinds[-1] == "run_stopped"
    assert json.loads(stopped[0])["detail"] == said
    assert "tool_finished" in kinds  # the write that ran is in the record


@pytest.mark.parametrize(
    ("new", "said"),
    [
        (
            '        return {"tags": {"a"}, "db_url": self.config["db_url"], "replicas": self.replicas,',  # noqa: E501
            'a dict that is not JSON data: ["tags"] is of type set (a list is JSON data)',
        ),
        (
            '        return {"at": [__import__("datetime").date(2026, 1, 1)], "db_url": self.config["db_url"], "replicas": self.replicas,',  # noqa: E501
            'a dict that is not JSON data: ["at"][0] is of type date',
        ),
        (
            '        return {"ratio": float("nan"), "db_url": self.config["db_url"], "replicas": self.replicas,',  # noqa: E501
            'a dict that is not JSON data: ["ratio"] is nan (JSON has no NaN or infinity)',
        ),
        (
            '        return {1: 2, "db_url": self.config["db_url"], "replicas": self.replicas,',
            "a dict that is not JSON data: its key 1 is not a str",
        ),
        (
            '        return [self.config["db_url"]] and {"db_url": self.config["db_url"], "replicas": self.replicas,',  # noqa: E501
            None,  # a dict after all: runs as before
        ),
    ],
)
async def test_a_snapshot_that_is_not_json_data_is_named(tmp_path, new, said) -> None:
    from conftest import run_env

    from loopdeck.core.states import StopReason

    env = _user_env(tmp_path, SNAPSHOT, new)
    outcome, _ = await run_env(env, "solve")
    if said is None:
        assert outcome.stop_reason is StopReason.GOAL_MET
        return
    assert outcome.stop_reason is StopReason.CRASHED
    assert outcome.detail == (
        f"snapshot() returned {said} (env.py:{_snapshot_line(env)}, in snapshot)"
    )


async def test_a_snapshot_that_is_a_list_is_named(tmp_path) -> None:
    from conftest import run_env

    env = _user_env(tmp_path, SNAPSHOT, "        return [1] or {")
    outcome, _ = await run_env(env, "solve")
    assert outcome.detail == (
        "snapshot() returned list, not a dict of JSON data"
        f" (env.py:{_snapshot_line(env)}, in snapshot)"
    )


def test_check_says_the_same_words(tmp_path, capsys) -> None:
    from loopdeck.cli import main

    env = _user_env(tmp_path, SNAPSHOT, LATE)
    assert main(["check", str(env)]) == 1
    out = capsys.readouterr().out
    fail = next(x for x in out.splitlines() if x.startswith("FAIL  solve:"))
    assert fail.endswith(
        '— snapshot() returned a dict that is not JSON data: ["obj"] is of type object'
        f" (env.py:{_snapshot_line(env)}, in snapshot)"
    )


def _unwritable(seq: int) -> object:
    from loopdeck.core.replay_events import StateSeen

    return StateSeen(run_id="r1", seq=seq, fingerprint="f", snapshot={"obj": object(), "n": 1})


async def test_an_event_that_cannot_be_json_is_a_stand_in_and_its_batch_commits(
    tmp_path,
) -> None:
    from loopdeck.core.events import OperatorCommand
    from loopdeck.store.opening import open_store
    from loopdeck.store.writer import EventWriter

    store = await open_store(tmp_path / "s.db")
    try:
        writer = EventWriter(store)
        told: list[str] = []
        writer.on_stand_in = told.append
        writer(OperatorCommand(run_id="r1", seq=1, command="pause", by="t"))
        writer(_unwritable(2))  # type: ignore[arg-type]
        writer(OperatorCommand(run_id="r1", seq=3, command="resume", by="t"))
        await writer.flush()
        rows = await store.fetchall("SELECT seq, body FROM events WHERE run_id = 'r1'")
    finally:
        await store.close()
    assert [row[0] for row in rows] == [1, 2, 3]
    body = json.loads(rows[1][1])
    assert body["snapshot"] == {"obj": "<not JSON data: object>", "n": 1}
    assert body["kind"] == "state_seen"
    assert told == writer.stand_ins and len(told) == 1
    assert "event 2 (state_seen) could not be made JSON" in told[0]


def test_a_spill_holding_such_an_event_never_raises(tmp_path) -> None:
    from loopdeck.core.events import OperatorCommand
    from loopdeck.store.writer import EventWriter

    store = SimpleNamespace(path=tmp_path / "s.db", backend="sqlite")  # nothing committed to it
    writer = EventWriter(store)  # type: ignore[arg-type]
    writer(_unwritable(1))  # type: ignore[arg-type]
    writer(OperatorCommand(run_id="r1", seq=2, command="pause", by="t"))
    spilled = writer.spill()
    assert spilled is not None
    lines = spilled.read_text().splitlines()
    assert [json.loads(line)["seq"] for line in lines[1:]] == [1, 2]
    assert json.loads(lines[1])["snapshot"]["obj"] == "<not JSON data: object>"
