"""The console leaves (almost) nothing for the cyclic collector (issue 11, target 3).

Its pauses stalled the console's loop; what it collected was Textual's cached strips and
LRU rings, and the pure-Python JSON encoder's closures. These check the garbage is gone and
that what replaced it draws and writes the same.
"""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from conftest import SAMPLES
from console_helpers import console_app, finished, wait_until
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.segment import Segment
from rich.style import Style
from textual.cache import LRUCache
from textual.strip import Strip

from loopdeck import tuning
from loopdeck.core import AutoApprover
from loopdeck.core.text import indented_json
from loopdeck.tuning import strip_caches, textual_cycles


@contextmanager
def garbage_kinds() -> Iterator[Counter[str]]:
    """The type names of what the collector frees inside the block (nothing is freed)."""
    found: Counter[str] = Counter()
    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        yield found
        gc.collect()
        found.update(_kind(o) for o in gc.garbage)
    finally:
        gc.set_debug(0)
        gc.garbage.clear()


def _kind(thing: object) -> str:
    if callable(thing) and hasattr(thing, "__qualname__") and not isinstance(thing, type):
        return f"{type(thing).__name__} {thing.__qualname__}"
    return type(thing).__name__


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.tuples(inner, inner)
        | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=30,
)


@settings(max_examples=400, deadline=None)
@given(json_values, st.sampled_from([1, 2, 4]))
def test_indented_json_is_json_dumps_to_the_character(value: Any, indent: int) -> None:
    assert indented_json(value, indent) == json.dumps(
        value, indent=indent, ensure_ascii=False, default=str
    )


def test_indented_json_falls_back_to_json_dumps_for_what_it_does_not_write() -> None:
    odd = {1: "int key", None: [object()], "set": {1}}
    assert indented_json(odd) == json.dumps(odd, indent=2, ensure_ascii=False, default=str)
    deep: list[Any] = []
    for _ in range(150):
        deep = [deep]
    assert indented_json(deep) == json.dumps(deep, indent=2)


def test_indented_json_leaves_no_garbage() -> None:
    value = {"args": {"service": "api", "replicas": [1, 2.5, None]}, "ok": True}
    with garbage_kinds() as found:
        for _ in range(50):
            indented_json(value)
    assert not found


segments = st.lists(
    st.builds(
        Segment,
        st.text(alphabet="ab xé", min_size=1, max_size=6),
        st.sampled_from([None, Style(bold=True)]),
    ),
    max_size=5,
)


@settings(max_examples=300, deadline=None)
@given(segments, st.lists(st.integers(min_value=0, max_value=30), max_size=4))
def test_a_strip_divides_and_crops_as_textual_does(line: list[Segment], cuts: list[int]) -> None:
    textual_cycles.install()
    strip, fresh = Strip(line), Strip(line)
    length = strip.cell_length
    for wanted in ([*sorted(cuts), length], [length], sorted(cuts)):
        ours = Strip.divide(strip, wanted)
        theirs = Strip.divide.__wrapped__(fresh, wanted)  # type: ignore[attr-defined]
        assert [list(s) for s in ours] == [list(s) for s in theirs]
    for start, end in ((0, length), (-1, length), (1, length), (0, length + 3), (2, 1)):
        ours_cut = Strip.crop_extend(strip, start, end, None)
        theirs_cut = Strip.crop_extend.__wrapped__(fresh, start, end, None)  # type: ignore[attr-defined]
        assert list(ours_cut) == list(theirs_cut)
        assert ours_cut.cell_length == theirs_cut.cell_length


def test_uncut_strips_and_cleared_lru_caches_are_freed_without_the_collector() -> None:
    textual_cycles.install()
    with garbage_kinds() as found:
        for i in range(20):
            strip = Strip([Segment(f"line {i}")])
            strip.divide([strip.cell_length])
            strip.crop_extend(0, strip.cell_length, None)
            cache: LRUCache[int, Strip] = LRUCache(8)
            for key in range(12):
                cache[key] = strip
            cache.get(3)
            cache.clear()  # a cache dropped whole still leaves its ring: widgets outlive it
            del strip, cache
    assert not found


async def console_run_garbage() -> Counter[str]:
    """What the collector frees while a console runs `service_outage/solve`, tuned as
    `loopdeck run` tunes it."""
    tuning.for_console()
    app = console_app(SAMPLES / "service_outage", "solve", approver=AutoApprover())
    async with app.run_test(size=(160, 48)) as pilot:
        with garbage_kinds() as found:
            await wait_until(pilot, lambda: finished(app))
            await pilot.pause()
    return found


@pytest.mark.slow
def test_a_console_run_leaves_no_strips_for_the_collector() -> None:
    # In a fresh process: an app an earlier test left alive can be freed inside the window,
    # whole screens of strips that are not this run's.
    here = Path(__file__).parent
    code = (
        "import asyncio, json, test_collector_garbage as t; "
        "print(json.dumps(asyncio.run(t.console_run_garbage())))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=here,
        env={**os.environ, "PYTHONPATH": str(here)},
    ).stdout  # fmt: skip
    found = Counter(json.loads(out.splitlines()[-1]))
    # A widget Textual removes (a toast that timed out) is a cycle and takes the few strips it
    # drew with it; what the frames drew is not there (161 strips here before the fix).
    assert found["Strip"] <= 10, found
    assert not [kind for kind in found if "_iterencode" in kind], found


def textual_strip(line: list[Segment]) -> Strip:
    """A strip built by Textual's own `__init__`, every cache made up front."""
    strip = Strip.__new__(Strip)
    getattr(Strip.__init__, "__wrapped__", Strip.__init__)(strip, line)
    return strip


def strip_results(strip: Strip, cuts: list[int], width: int) -> list[Any]:
    style = Style(bold=True)
    length = strip.cell_length
    results: list[Any] = [[list(s) for s in strip.divide([*sorted(cuts), length])]]
    for _ in range(2):  # twice: the second time from the caches
        results += [
            list(strip.crop(1, width)),
            list(strip.crop_extend(0, width, None)),
            list(strip.apply_style(style)),
            list(strip.adjust_cell_length(width, style)),
            list(strip.apply_offsets(2, 3)),
            [list(s) for s in strip.divide(sorted(cuts))],
            strip.text,
        ]
    return results


@settings(max_examples=300, deadline=None)
@given(segments, st.lists(st.integers(min_value=0, max_value=30), max_size=4), st.integers(0, 30))
def test_a_strip_with_caches_made_on_first_use_gives_what_textuals_gives(
    line: list[Segment], cuts: list[int], width: int
) -> None:
    assert strip_caches.install()
    textual_cycles.install()
    ours = strip_results(Strip(line), cuts, width)
    assert ours == strip_results(textual_strip(line), cuts, width)


def test_a_strip_makes_a_cache_when_it_first_uses_it_at_textuals_size() -> None:
    assert strip_caches.install()
    strip = Strip([Segment("hello world")])
    slots = {name: Strip.__dict__[name].slot for name in strip_caches.CACHE_SIZES}
    for slot in slots.values():
        with pytest.raises(AttributeError):
            slot.__get__(strip, Strip)  # not made
    strip.crop(1, 4)
    made = slots["_crop_cache"].__get__(strip, Strip)
    # Textual's FIFOCache keeps its size private (`_maxsize`): the size is what is compared.
    assert made._maxsize == strip_caches.CACHE_SIZES["_crop_cache"] == 16
    assert len(made) == 1
    with pytest.raises(AttributeError):
        slots["_style_cache"].__get__(strip, Strip)  # still not made
    sizes = {name: getattr(textual_strip([]), name)._maxsize for name in strip_caches.CACHE_SIZES}
    assert sizes == strip_caches.CACHE_SIZES


def test_a_textual_whose_strips_differ_keeps_its_own() -> None:
    code = (
        "from textual.strip import Strip; from loopdeck.tuning import strip_caches as s; "
        "init = Strip.__init__; s.WRITTEN_AGAINST = '0' * 64; "
        "print(s.install(), Strip.__init__ is init, type(Strip.__dict__['_crop_cache']).__name__)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.split()
    assert out == ["False", "True", "member_descriptor"]
