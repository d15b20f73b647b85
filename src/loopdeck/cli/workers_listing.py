"""`loopdeck workers`: which workers run for the store (`store/presence.py`), oldest first.

    loopdeck workers [--db URL] [--json]

A worker is `running` while its heartbeat reaches the store, `silent` once it has not for
longer than its lease (killed, stopped, or cut off from the store: its runs move to other
workers), `stopped` once it stopped claiming. Each says how many of its slots hold a run
("2 of ?": a worker of an older loopdeck, which keeps no row, known by the leases it holds).
Workers gone for longer than a day are forgotten. Exit 0; no worker at all is said so.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from datetime import UTC, datetime

from rich.console import RenderableType
from rich.text import Text

from loopdeck.cli.tables import Column, fitted, short_clock
from loopdeck.core.text import visible
from loopdeck.operator.records import Store
from loopdeck.operator.waking import SILENT, SeenWorker


def none_words(store: Store) -> str:
    """What `workers` says of a store no worker ran for (in the last day)."""
    said = f"no worker has run for {visible(str(store.path))} in the last day"
    if store.backend == "sqlite":  # a PostgreSQL store is named without its password
        said += f": `loopdeck worker --db {shlex.quote(str(store.path))}` starts one"
    return said


def workers_table(
    store: Store, workers: Sequence[SeenWorker], now: float, width: int
) -> RenderableType:
    """Each worker: its name (host/pid/token, never cut), its state (a silent one with how
    long it has been), the runs it holds of its slots, its start and when it was last heard
    of. Giving way: the start, when it was last heard of, then its name folded after its host."""
    title = Text(f"workers of {visible(str(store.path))}, oldest first")
    names = tuple(worker.holder for worker in workers)
    # Its host on a line, its process and token on the next, where a long host name is wider.
    folds = tuple(_folded(name) for name in names)
    columns = [
        Column("worker", names, keep=True),
        Column("state", tuple(_state(worker, now) for worker in workers)),
        Column(
            "runs", tuple(f"{worker.holds} of {_or_unknown(worker.slots)}" for worker in workers)
        ),
        Column("started", tuple(_clock(worker.started_at) for worker in workers), keep=True),
        Column("last heard", tuple(_ago(worker, now) for worker in workers)),
    ]
    give_way = [("started", None), ("last heard", None),
                ("worker", Column("worker", names, folds=folds))]  # fmt: skip
    return fitted(title, columns, give_way, width)


def _folded(name: str) -> tuple[str, ...]:
    host, _, rest = name.partition("/")
    return (f"{host}/", rest) if rest else (name,)


def _or_unknown(slots: int | None) -> str:
    return "?" if slots is None else str(slots)  # "?": a worker of an older loopdeck


def _state(worker: SeenWorker, now: float) -> str:
    state = worker.state(now)
    if state == SILENT:
        return f"silent {_seconds(now - worker.seen_at)}"
    return state


def _ago(worker: SeenWorker, now: float) -> str:
    if worker.stopped_at is not None:
        return f"stopped {_clock(worker.stopped_at)}"
    return f"{_seconds(now - worker.seen_at)} ago"


def _seconds(seconds: float) -> str:
    seconds = max(seconds, 0.0)
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.0f}h"


def _clock(at: float) -> str:
    """Local time to the second, its day too when not today (as `runs` says a start)."""
    return short_clock(datetime.fromtimestamp(at, UTC).isoformat())
