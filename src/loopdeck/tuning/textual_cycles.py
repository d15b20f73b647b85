"""Textual's render caches without the reference cycles they leave to the collector.

Three of Textual's caches make garbage that only the cyclic collector frees:

- `Strip.divide` caches its result in the strip's own cache, and when the cut is the whole
  strip that result is `[self]`; `Strip.crop_extend` caches `self` when nothing is cropped or
  added. Each such strip is a cycle (strip -> cache -> strip) with its seven caches and its
  segments. The compositor passes most lines uncut.
- `LRUCache` keeps its entries in a ring of links; `clear` drops the ring whole, and a ring is
  a cycle. `RichLog` (the transcript panel) clears its line cache on every write, so every
  write left up to a screenful of strips in a ring.

Under a runaway the console made ~480 such objects per model call, and the collector's pauses
stalled its loop for tens of ms (issue 11, target 3). `install` wraps the three methods:

- the whole-strip cases return the strip itself, uncached, as the originals do before they
  cache it; every other case goes to the original, cache and all;
- `clear` empties each link before the original drops the ring, so refcounting frees it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from rich.style import Style
from textual.cache import LRUCache
from textual.strip import Strip

_INSTALLED = "_loopdeck_without_cycle"


def _divide(original: Callable[[Strip, Iterable[int]], Sequence[Strip]]) -> Any:
    def divide(self: Strip, cuts: Iterable[int]) -> Sequence[Strip]:
        cell_length = self.cell_length
        kept = [cut for cut in cuts if cut <= cell_length]
        if kept == [cell_length]:
            return [self]
        return original(self, kept)

    return divide


def _crop_extend(original: Callable[[Strip, int, int, Style | None], Strip]) -> Any:
    def crop_extend(self: Strip, start: int, end: int, style: Style | None) -> Strip:
        if start <= 0 and end == self.cell_length:
            return self
        return original(self, start, end, style)

    return crop_extend


def _clear(original: Callable[[LRUCache[Any, Any]], None]) -> Any:
    def clear(self: LRUCache[Any, Any]) -> None:
        links = getattr(self, "_cache", None)
        if isinstance(links, dict):
            for link in links.values():
                if isinstance(link, list):
                    link.clear()
        original(self)

    return clear


def install() -> None:
    """Wrap the three methods, once per process."""
    wraps: tuple[tuple[type, str, Callable[[Any], Any]], ...] = (
        (Strip, "divide", _divide),
        (Strip, "crop_extend", _crop_extend),
        (LRUCache, "clear", _clear),
    )
    for owner, name, wrap in wraps:
        if getattr(getattr(owner, name), _INSTALLED, False):
            continue
        original = getattr(owner, name)
        wrapped = wrap(original)
        wrapped.__wrapped__ = original  # what tests compare the wrapped method against
        setattr(wrapped, _INSTALLED, True)
        setattr(owner, name, wrapped)
