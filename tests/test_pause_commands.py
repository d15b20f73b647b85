"""`pause` and `resume` say what the run will do: a pause of a run paused (or with a pause on
its way), a resume of one not paused, is refused by name (exit 1), nothing sent."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from test_decision_refusals import Cli, Recorded, recorded

from loopdeck.core.states import RunState


def sent(db: Path) -> list[str]:
    with sqlite3.connect(db) as store:
        return [row[0] for row in store.execute("SELECT command FROM commands ORDER BY id")]


def test_a_pause_or_resume_the_run_would_do_nothing_with_is_refused(
    tmp_path: Path, cli: Cli
) -> None:
    db = tmp_path / "s.db"
    recorded(db, Recorded("r1").started(RunState.AWAITING_APPROVAL).write("c1"))
    code, said, err = cli("resume", "r1", "--json", "--db", str(db))
    assert code == 1 and "r1 is not paused: nothing to resume" in err
    assert said == {"run_id": "r1", "command": "resume", "sent": False,
                    "message": "r1 is not paused: nothing to resume"}  # fmt: skip
    code, said, err = cli("pause", "r1", "--json", "--db", str(db))
    assert code == 0 and said is not None and said["sent"] is True, err
    code, _, err = cli("pause", "r1", "--db", str(db))  # its runner has not taken it yet
    assert code == 1 and "r1 is already paused (sent, not taken yet)" in err
    with sqlite3.connect(db) as store:  # its runner took it: the run is paused
        store.execute("UPDATE commands SET consumed_at = 1")
        store.execute("UPDATE runs SET paused = 1")
    code, _, err = cli("pause", "r1", "--db", str(db))
    assert code == 1 and "r1 is already paused: `loopdeck resume r1` resumes it" in err
    code, _, err = cli("resume", "r1", "--db", str(db))
    assert code == 0, err
    assert sent(db) == ["pause", "resume"]


def test_a_pause_its_runner_took_and_has_not_recorded_yet_is_judged_as_taken(
    tmp_path: Path, cli: Cli
) -> None:
    """The runner takes a command (`take_commands`) a commit before its `operator_command`
    event sets `runs.paused`: in between, a second pause said `sent`, and a resume was
    refused as a no-op. The taking itself now says what the run is."""
    import asyncio

    from loopdeck.store import queries
    from loopdeck.store.opening import open_store

    db = tmp_path / "s.db"
    recorded(db, Recorded("r1").started(RunState.AWAITING_APPROVAL).write("c1"))

    def taken() -> list[str]:
        async def take() -> list[str]:
            store = await open_store(db)
            try:
                return [c["command"] for c in await queries.take_commands(store, "r1")]
            finally:
                await store.close()

        return asyncio.run(take())

    assert cli("pause", "r1", "--db", str(db))[0] == 0
    assert taken() == ["pause"]  # its event not committed yet
    code, _, err = cli("pause", "r1", "--db", str(db))
    assert code == 1 and "r1 is already paused: `loopdeck resume r1` resumes it" in err
    code, _, err = cli("resume", "r1", "--db", str(db))
    assert code == 0, err
    assert taken() == ["resume"]
    code, _, err = cli("resume", "r1", "--db", str(db))
    assert code == 1 and "r1 is not paused: nothing to resume" in err
    assert sent(db) == ["pause", "resume"]
