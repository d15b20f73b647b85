"""Textual's strips with their caches made on first use.

Every `Strip` is built with seven `FIFOCache`s (crop, divide, style, filter, line length,
crop-extend, offsets), and most strips never use one: a frame of the run screen builds a few
hundred strips, and the screen's render caches keep the last frames' strips alive. Under a
runaway that was about 10,000 live caches in the collector's youngest generation at any time,
walked by every young collection (two fifths of what it walked, issue 11, targets 3 and 4),
and seven allocations a strip that brought the next collection closer.

`install` replaces each cache slot of `Strip` with a descriptor that makes the cache the first
time it is read, with the size Textual gives it, and `Strip.__init__` with one that leaves them
unmade. The caches are only ever read and written by `Strip`'s own methods, through these
attributes, so nothing else changes. It is installed only over the Textual it was written
against (`refusal`: its version, the sha256 of `Strip.__init__`'s source, each cache a slot of
`Strip`): a Textual whose strips differ keeps its own.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from rich.segment import Segment
from textual.cache import FIFOCache
from textual.strip import Strip

from loopdeck.tuning.guards import source_digest as digest_of
from loopdeck.tuning.guards import textual_refusal

# The sizes Textual's `Strip.__init__` gives each cache.
CACHE_SIZES = {
    "_divide_cache": 4,
    "_crop_cache": 16,
    "_style_cache": 16,
    "_filter_cache": 4,
    "_line_length_cache": 4,
    "_crop_extend_cache": 4,
    "_offsets_cache": 4,
}
WRITTEN_AGAINST = "ce1d8154dca8cfd78cd46aa14a40b23436c94696447efbe74eb17f0e0a4a550d"
TEXTUAL_VERSIONS = ((8, 2), (9, 0))
_INSTALLED = "_loopdeck_lazy_caches"


class _MadeOnFirstUse:
    """A cache slot of `Strip`: the cache is made the first time the slot is read."""

    def __init__(self, slot: Any, size: int) -> None:
        self.slot = slot  # the slot's own member descriptor
        self.size = size

    def __get__(self, strip: Strip | None, owner: type | None = None) -> Any:
        if strip is None:
            return self
        try:
            return self.slot.__get__(strip, owner)
        except AttributeError:
            cache: FIFOCache[Any, Any] = FIFOCache(self.size)
            self.slot.__set__(strip, cache)
            return cache

    def __set__(self, strip: Strip, value: Any) -> None:
        self.slot.__set__(strip, value)


def _init(self: Strip, segments: Iterable[Segment], cell_length: int | None = None) -> None:
    self._segments = list(segments)
    self._cell_length = cell_length
    self._render_cache = None
    self._link_ids = None
    self._cell_count = None


def source_digest() -> str:
    return digest_of(Strip.__init__)


def refusal() -> str | None:
    """Why the caches must stay Textual's own in this Textual, if they must (asked of
    Textual's own `Strip`, installed or not)."""
    for name in CACHE_SIZES:
        slot = Strip.__dict__.get(name)
        if isinstance(slot, _MadeOnFirstUse):
            slot = slot.slot
        if type(slot).__name__ != "member_descriptor":
            return f"Strip.{name} is not a slot of Strip (Textual's strips differ)"
    return textual_refusal(TEXTUAL_VERSIONS, {"Strip.__init__": (Strip.__init__, WRITTEN_AGAINST)})


def install() -> bool:
    """True if the caches are made on first use (now or already); False (Textual's own
    kept) if `refusal` gives a reason."""
    if getattr(Strip.__init__, _INSTALLED, False):
        return True
    if refusal() is not None:
        return False
    for name, size in CACHE_SIZES.items():
        setattr(Strip, name, _MadeOnFirstUse(Strip.__dict__[name], size))
    _init.__wrapped__ = Strip.__init__  # type: ignore[attr-defined]
    setattr(_init, _INSTALLED, True)
    Strip.__init__ = _init  # type: ignore[method-assign]
    return True
