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

Each wrap relies on what the original does (when `divide` and `crop_extend` return the strip
as it is, that `clear` drops a dict of list links): `refusal` says why not when Textual's
version or any of the three methods' source is not the one it was written against.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from rich.style import Style
from textual.cache import LRUCache
from textual.strip import Strip

from loopdeck.tuning.guards import textual_refusal

_INSTALLED = "_loopdeck_without_cycle"
TEXTUAL_VERSIONS = ((8, 2), (9, 0))
# The sha256 of each wrapped method's source, as read when the wraps were written (8.2.8).
WRITTEN_AGAINST = {
    "Strip.divide": "f6764f25c39e144b942b4358ca8d3d7afe98dd01c23514ac55b2b6b9bc57ad3a",
    "Strip.crop_extend": "5e83b1f823fcb36181b4e8ebbb15f589b6545db8502d191092e2019d343ce605",
    "LRUCache.clear": "840350756f822f0dc709d3ed6295d527f636c81cd6cba29c7378c754eed60efc",
}


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


def refusal() -> str | None:
    """Why the wraps must not be installed over this Textual, if they must not."""
    replaced: dict[str, Callable[..., Any]] = {
        "Strip.divide": Strip.divide,
        "Strip.crop_extend": Strip.crop_extend,
        "LRUCache.clear": LRUCache.clear,
    }
    return textual_refusal(
        TEXTUAL_VERSIONS, {name: (replaced[name], d) for name, d in WRITTEN_AGAINST.items()}
    )


def install() -> None:
    """Wrap the three methods, once per process (`refusal` first: it is not asked here)."""
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
