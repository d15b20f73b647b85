"""The fleet's runs in their order, kept by what changed (issue 43): a refresh moves the runs
that changed to their places, never sorts them all again.

Each run has a key in the order (`sort_key`): whether it needs the operator first, then what
the sort says, then newest first, then when the fleet first saw it (`seq`, the rows' own
order, so that runs alike keep theirs as a stable sort would). The keys are kept sorted in a
list, each run's key beside it: a run that changed is taken out at its old key and put in at
its new one (a bisection each, and a move of the list's tail in C), a run's place is found by
bisection, and the runs that need the operator are the ones before the first key that says
they do not (`leading`). A screen reads it as a sequence; a list the filter kept is read the
same way (`Listed`).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import Any, Literal, Protocol, TypeVar

# How the fleet's runs are ordered, each with its words; `s` goes to the next.
Sort = Literal["needs you", "newest", "env"]
SORTS: dict[Sort, str] = {"needs you": "needs you first", "newest": "newest first", "env": "by env"}

Key = tuple[Any, ...]
_CALM: Key = (True,)  # below every key of a run that needs nobody, above every other


class Ranked(Protocol):
    """What a run's place depends on (a `FleetRow`)."""

    @property
    def run_id(self) -> str: ...
    @property
    def env(self) -> str: ...
    @property
    def script(self) -> str: ...
    @property
    def started_at(self) -> datetime | None: ...
    @property
    def live(self) -> bool: ...
    @property
    def needs_operator(self) -> str: ...


R = TypeVar("R", bound=Ranked)


def sort_key(row: Ranked, sort: Sort, seq: int) -> Key:
    """The run's key: the runs that need the operator before the others in every order;
    with `needs you` the live ones next; with `env` by env and script; then newest first (a
    run not started yet last), then the fleet's first sight of it."""
    started = -row.started_at.timestamp() if row.started_at is not None else math.inf
    calm = not row.needs_operator
    if sort == "needs you":
        return (calm, not row.live, started, seq)
    if sort == "env":
        return (calm, row.env, row.script, started, seq)
    return (calm, started, seq)


class Order(Sequence[R]):
    """Every run of a fleet in one `Sort`, kept sorted as runs are put in (`put`) and
    taken out (`drop`)."""

    def __init__(self, sort: Sort) -> None:
        self.sort: Sort = sort
        self._keys: list[Key] = []
        self._rows: list[R] = []
        self._key_of: dict[str, Key] = {}

    def put(self, row: R, seq: int) -> None:
        """The run at its place as it is now (moved there if it was elsewhere)."""
        key = sort_key(row, self.sort, seq)
        old = self._key_of.get(row.run_id)
        if old == key:
            self._rows[bisect.bisect_left(self._keys, key)] = row  # it may be a new object
            return
        if old is not None:
            self._take_out(old)
        at = bisect.bisect_left(self._keys, key)
        self._keys.insert(at, key)
        self._rows.insert(at, row)
        self._key_of[row.run_id] = key

    def drop(self, run_id: str) -> None:
        old = self._key_of.pop(run_id, None)
        if old is not None:
            self._take_out(old)

    def _take_out(self, key: Key) -> None:
        at = bisect.bisect_left(self._keys, key)
        del self._keys[at]
        del self._rows[at]

    def __len__(self) -> int:
        return len(self._rows)

    def __getitem__(self, index: Any) -> Any:
        return self._rows[index]

    def __iter__(self) -> Iterator[R]:
        return iter(self._rows)

    def index_of(self, run_id: str) -> int | None:
        key = self._key_of.get(run_id)
        return None if key is None else bisect.bisect_left(self._keys, key)

    @property
    def leading(self) -> int:
        return bisect.bisect_left(self._keys, _CALM)


class Listed(Sequence[R]):
    """Runs already in their order (the ones a filter kept, a test's list): their places
    found once, when first asked."""

    def __init__(self, rows: Sequence[R]) -> None:
        self._rows = list(rows)
        self._index: dict[str, int] | None = None

    def __len__(self) -> int:
        return len(self._rows)

    def __getitem__(self, index: Any) -> Any:
        return self._rows[index]

    def __iter__(self) -> Iterator[R]:
        return iter(self._rows)

    def index_of(self, run_id: str) -> int | None:
        if self._index is None:
            self._index = {row.run_id: i for i, row in enumerate(self._rows)}
        return self._index.get(run_id)

    @property
    def leading(self) -> int:
        return next((i for i, row in enumerate(self._rows) if not row.needs_operator), len(self))


def listing(rows: Sequence[R]) -> Order[R] | Listed[R]:
    """`rows` as a `Listing`: an `Order` as it is, anything else listed as given."""
    return rows if isinstance(rows, Order | Listed) else Listed(rows)
