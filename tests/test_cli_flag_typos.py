"""A mistyped flag is refused naming the flag the command takes that is closest to it, and
only a close one: `--hedless` is `--headless`, `--reasn` under `approve` (which takes no
reason) is nothing."""

from __future__ import annotations

import pytest

from loopdeck.cli import main


@pytest.mark.parametrize(
    ("argv", "meant"),
    [
        (["run", "service_outage", "--hedless"], "--headless"),
        (["run", "service_outage", "--aprove=auto"], "--approve"),
        (["runs", "--josn"], "--json"),
        (["reject", "r1", "c1", "--reasn", "no"], "--reason"),
    ],
)
def test_a_mistyped_flag_names_the_one_meant(capsys, argv, meant) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    last = capsys.readouterr().err.splitlines()[-1]
    assert last.endswith(f"; did you mean {meant}?"), last


@pytest.mark.parametrize(
    "argv", [["run", "service_outage", "--bogus"], ["approve", "r1", "c1", "--reasn", "no"]]
)
def test_a_flag_close_to_none_names_none(capsys, argv) -> None:
    with pytest.raises(SystemExit):
        main(argv)
    assert "did you mean" not in capsys.readouterr().err
