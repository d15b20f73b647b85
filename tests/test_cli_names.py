"""Names the command line forgives: a mistyped command gets the nearest one suggested, and a
run id may be given by a prefix only one run's id starts with (several: exit 2, listed)."""

from pathlib import Path

import pytest
from conftest import SAMPLES

from loopdeck.cli import main


def test_a_mistyped_command_suggests_the_nearest(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["aprove", "r1", "c1"])
    assert exited.value.code == 2
    assert "did you mean approve?" in capsys.readouterr().err


def test_a_mistyped_choice_suggests_the_nearest(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["run", "order_support", "--approve", "aut"])
    assert "did you mean auto?" in capsys.readouterr().err


def test_nothing_near_suggests_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["zzzzzz"])
    assert "did you mean" not in capsys.readouterr().err


@pytest.fixture
def db(tmp_path: Path) -> str:
    path = str(tmp_path / "runs.db")
    for run_id in ("3f2a-first", "3f9c-second"):
        args = ["run", str(SAMPLES / "order_support"), "--headless", "--approve", "auto"]
        code = main([*args, "--db", path, "--run-id", run_id])
        assert code == 0
    return path


def test_a_run_id_matches_by_its_unique_prefix(db: str, capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    assert main(["grants", "3f2a", "--db", db]) == 0
    assert "run 3f2a-first" in capsys.readouterr().out


def test_an_ambiguous_prefix_exits_2_listing_the_runs(
    db: str, capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    assert main(["grants", "3f", "--db", db]) == 2
    err = capsys.readouterr().err
    assert "ambiguous" in err and "3f2a-first" in err and "3f9c-second" in err
    assert main(["grants", "77", "--db", db]) == 2  # no run starts so: named as missing
    assert "no run '77'" in capsys.readouterr().err
