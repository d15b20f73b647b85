"""A run submitted and not started by a worker yet is in `loopdeck runs` as queued: the
commands that read its log say so, not that there is no such run. `export` of it is an empty
export (nothing written, exit 0) saying why; a command that acts on a run is refused as
before (exit 2), saying it is queued."""

from __future__ import annotations

from pathlib import Path

from test_placement_checks import Cli, queued

from loopdeck.cli import main


def test_export_of_a_queued_run_says_it_has_no_events_yet(cli: Cli, tmp_path: Path, capsys) -> None:
    db = tmp_path / "s.db"
    code, done, err = cli("submit", "order_support", "--json", "--db", str(db))
    assert code == 0 and done is not None, err
    run_id = str(done["run_id"])
    assert list(queued(db)) == [run_id]
    code, listed, _ = cli("runs", "--json", "--db", str(db))
    assert [(run["run_id"], run["state"]) for run in listed or []] == [(run_id, "queued")]
    for named in (run_id, run_id[:6]):  # its id, or a prefix only it starts
        assert main(["export", named, "--db", str(db)]) == 0
        out, err = capsys.readouterr()
        assert out == ""  # nothing exported
        said = f"run {run_id} is queued: no worker has started it, so it has no events yet"
        assert f"loopdeck: {said}; nothing exported" in err
        assert "no run" not in err
    code, _, err = cli("cancel", run_id, "--db", str(db))
    assert code == 2 and f"run {run_id} is queued: " in err and "nothing to cancel" in err
    code, _, err = cli("export", "nope", "--db", str(db))
    assert code == 2 and "no run 'nope'" in err  # a run that is not there: as before


def test_a_fork_of_a_queued_run_says_it_is_queued(cli: Cli, tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    code, done, err = cli("submit", "order_support", "--json", "--db", str(db))
    assert code == 0 and done is not None, err
    run_id = str(done["run_id"])
    for named in (run_id, run_id[:6]):
        code, _, err = cli("fork", named, "--at", "c1", "--db", str(db))
        assert code == 2 and f"run {run_id} is queued: " in err, err
        assert "nothing to fork" in err and "no run" not in err
    assert list(queued(db)) == [run_id]  # nothing else queued
