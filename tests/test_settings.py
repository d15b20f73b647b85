"""One `Settings`: every `LOOPDECK_*` variable read in one module, each listed in the README,
a test's `setenv` seen at the next read (the layers test holds that no other module reads one)."""

from __future__ import annotations

from pathlib import Path

import pytest

from loopdeck import settings
from loopdeck.settings import Settings

README = Path(__file__).resolve().parent.parent / "README.md"


def test_every_variable_is_in_the_readmes_table() -> None:
    rows = [
        line
        for line in README.read_text(encoding="utf-8").splitlines()
        if line.startswith("| `LOOPDECK_")
    ]
    listed = [row.split("`")[1] for row in rows]
    assert listed == list(settings.VARIABLES)


def test_an_empty_environment_says_the_defaults() -> None:
    assert Settings.read({}) == Settings()
    assert Settings().config is None and Settings().notify == () and not Settings().tuning_off


def test_each_variable_is_read_into_its_field(tmp_path: Path) -> None:
    said = Settings.read(
        {
            "LOOPDECK_DB": "postgresql://u@h/db", "LOOPDECK_LEASE_S": "2.5",
            "LOOPDECK_PARK_AFTER_S": "0", "LOOPDECK_CRASH_SILENCE_S": "soon",
            "LOOPDECK_TUNING": " OFF ", "LOOPDECK_STOCK_LITELLM": "1",
            "LOOPDECK_THEMES": str(tmp_path), "LOOPDECK_USER_POLICY": "None",
            "LOOPDECK_CONFIG": str(tmp_path / "c.toml"),
            "LOOPDECK_NOTIFY": " ntfy://a/t  json://b:1/x ",
            "LOOPDECK_NOTIFY_AFTER": "abc",
        }
    )  # fmt: skip
    assert said.db == "postgresql://u@h/db" and said.lease_s == 2.5
    assert said.park_after_s == 10.0 and said.crash_silence_s == 30.0  # unreadable: the default
    assert said.tuning_off and said.stock_litellm and said.themes == tmp_path
    assert said.user_policy == settings.NO_FILE and said.config == tmp_path / "c.toml"
    assert said.notify == ("ntfy://a/t", "json://b:1/x") and said.notify_after == "abc"


def test_a_variable_set_after_the_first_read_is_seen(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LOOPDECK_LEASE_S", raising=False)
    first = settings.current()
    assert settings.current() is first  # read once while nothing changed
    monkeypatch.setenv("LOOPDECK_LEASE_S", "4")
    assert settings.current().lease_s == 4.0
    monkeypatch.delenv("LOOPDECK_LEASE_S")
    assert settings.current() == first
