"""`loopdeck pending` at 80 columns shows what would be approved whole: a write's arguments
fold onto lines of their own (they ended in "…" after 20 characters, the address unread), up
to a cap past which the truncation mark says how much `--json` has."""

from __future__ import annotations

import io
from datetime import UTC, datetime, timedelta

from rich.console import Console

from loopdeck.cli import tables
from loopdeck.operator.records import PendingWrite

NOW = datetime(2026, 12, 5, 3, 0, tzinfo=UTC)


def _write(args: dict[str, object]) -> PendingWrite:
    return PendingWrite(
        run_id="0e6f4c0f1622", call_id="c3", tool="update_delivery_address", args=args,
        env="order_support/solve", expires=NOW + timedelta(minutes=5),
    )  # fmt: skip


def _printed(writes: list[PendingWrite], width: int) -> list[str]:
    out = io.StringIO()
    Console(file=out, width=width).print(tables.pending_table(writes, NOW, width))
    lines = out.getvalue().splitlines()
    assert max(len(line) for line in lines) <= width, "\n".join(lines)
    return lines


def test_the_arguments_fold_whole_at_80_columns() -> None:
    args = {"order_id": "ORD-1042", "new_address": "7 New Street, Springfield"}
    lines = _printed([_write(args)], 80)
    said = "\n".join(lines)
    assert "…" not in said, said
    start = next(line for line in lines if "0e6f4c0f1622" in line).index('{"order_id"')
    column = "".join(line[start:].split("  ")[0] + " " for line in lines if len(line) > start)
    assert " ".join(column.split()).endswith('"new_address": "7 New Street, Springfield"}'), said


def test_arguments_past_the_cap_end_in_the_truncation_mark() -> None:
    said = "\n".join(_printed([_write({"content": "x" * 5000})], 100))
    assert "truncated" in said and said.count("x") < 1000, said
