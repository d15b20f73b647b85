"""`loopdeck runs` and `pending` write the rows of a table that fits themselves (Rich draws
the title, the header and the edges): what they print is what Rich's own layout of every cell
prints, character for character and style for style, at any width, with wide characters,
cut cells and hostile text; a table that does not fit, or a cell Rich would break, is Rich's."""

from __future__ import annotations

import io
from datetime import UTC, datetime, timedelta

import pytest
from rich.console import Console
from rich.table import Table
from rich.text import Text

from loopdeck.cli import tables
from loopdeck.operator.records import PendingWrite, Placement, RunEntry

NOW = datetime(2026, 12, 5, 3, 0, tzinfo=UTC)
NAMES = [
    "order_support", "服务中断_service_outage", "a" * 60, "emoji_🚀_env", "[bold]x[/bold]",
    "\x1b[31mred", "e\u0301clair", "\u202eevil", "x",
]  # fmt: skip


def _run(i: int) -> RunEntry:
    name = NAMES[i % len(NAMES)]
    return RunEntry(
        run_id=f"{i:012x}", env=name, script=NAMES[(i + 3) % len(NAMES)] if i % 4 else None,
        model=NAMES[(i + 5) % len(NAMES)], state="stopped" if i % 3 else "awaiting_approval",
        stop_reason="goal_met" if i % 3 else None,
        started_at=(NOW + timedelta(minutes=i)).isoformat(), ended_at=None,
        tokens=None if i % 5 == 0 else 1234 * i, cost_usd=None if i % 5 == 0 else 0.01 * i,
        host="host-a" if i % 2 else None, pid=4242, paused=i % 6 == 0,
        outcome_unknown=(f"call_{i}",) if i % 7 == 0 else (),
        placement=Placement("parked", "host-b", "parked", NOW) if i % 8 == 1 else None,
    )  # fmt: skip


def _write(i: int) -> PendingWrite:
    return PendingWrite(
        run_id=f"{i:012x}", call_id=f"call_{NAMES[i % len(NAMES)][:20]}", tool=NAMES[i % 4],
        args={"text": NAMES[(i + 1) % len(NAMES)] * (i % 3 + 1)}, env="e/s",
        expires=NOW + timedelta(minutes=i - 3),
    )  # fmt: skip


def _printed(renderable: object, width: int, terminal: bool) -> str:
    out = io.StringIO()
    Console(file=out, width=width, force_terminal=terminal, color_system="truecolor").print(
        renderable
    )
    return out.getvalue()


def _by_rich(monkeypatch: pytest.MonkeyPatch, make: object) -> object:
    """The same table laid out by Rich cell by cell (every cell taken as one that breaks)."""
    with monkeypatch.context() as patched:
        patched.setattr(tables, "_breaks", lambda cell: True)
        made = make()  # type: ignore[operator]
    assert isinstance(made, Table)
    return made


@pytest.mark.parametrize("width", [60, 80, 100, 132, 200, 400])
@pytest.mark.parametrize("terminal", [False, True])
def test_rows_written_are_rich_s_rows(monkeypatch, width: int, terminal: bool) -> None:
    runs = [_run(i) for i in range(40)]
    writes = [_write(i) for i in range(12)]
    for make in (
        lambda: tables.runs_table(Text("runs in x, newest first"), runs, width),
        lambda: tables.pending_table(writes, NOW, width),
    ):
        ours = make()
        theirs = _by_rich(monkeypatch, make)
        assert _printed(ours, width, terminal) == _printed(theirs, width, terminal)


def test_a_table_that_fits_is_written_by_rows_and_one_that_breaks_is_rich_s() -> None:
    runs = [_run(i) for i in range(5)]
    assert isinstance(tables.runs_table("t", runs, 400), tables.Drawn)
    broken = [*runs, RunEntry(**{**vars(runs[0]), "run_id": "tab", "env": "a\tb"})]
    assert isinstance(tables.runs_table("t", broken, 400), Table)
    assert isinstance(tables.runs_table("t", runs, 20), Table)  # nothing fits in 20


def test_an_env_and_script_folded_onto_two_lines_are_written_as_rich_writes_them(
    monkeypatch,
) -> None:
    """At 80 columns, a waiting run beside an outcome unknown: each env and script too wide
    for its column folds at its "/" (env, then script under it), written by rows as Rich would
    lay the folded cell out; a name wider than the whole table is Rich's own."""
    runs = [
        RunEntry(**{**vars(_run(i)), "env": env, "script": "wrong-guess", "state": state,
                    "stop_reason": stop, "paused": False, "outcome_unknown": unknown,
                    "placement": None})
        for i, (env, state, stop, unknown) in enumerate([
            ("service_outage", "awaiting_approval", None, ()),
            ("order_support", "stopped", "provider_failure", ("c3",)),
            ("x", "complete", "goal_met", ()),
        ])
    ]  # fmt: skip
    for width in (80, 76):
        ours = tables.runs_table("runs", runs, width)
        assert isinstance(ours, tables.Drawn)
        theirs = _by_rich(monkeypatch, lambda: tables.runs_table("runs", runs, width))  # noqa: B023
        for terminal in (False, True):
            assert _printed(ours, width, terminal) == _printed(theirs, width, terminal)
        said = _printed(ours, width, False)
        assert "service_outage/ " in said and "\n" + " " * 15 + "wrong-guess" in said, said
    wide = [RunEntry(**{**vars(runs[0]), "env": "e" * 90})]
    assert isinstance(tables.runs_table("runs", wide, 80), Table)
