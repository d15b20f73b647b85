"""What each tuning was measured on or written for, and the words of a refusal.

A tuning is applied only where it is known to help: the collector's and the switch interval's
on the Python they were measured on; a patch of Textual over the Textual it was written for,
its version in range and each replaced function's source the one it was read from. Each check
returns None when the tuning may go ahead, or why not, in a few words.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import linecache
import re
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from types import CodeType
from typing import Any

# The Python the collector's thresholds and the switch interval were measured on
# (PERFORMANCE.md: bench/console_load.py, bench/model_path.py, A/B pairs on 3.11.7).
MEASURED_ON = (3, 11)


def python_refusal(measured_on: tuple[int, int] = MEASURED_ON) -> str | None:
    running = tuple(sys.version_info[:2])
    if running == measured_on:
        return None
    shown = ".".join(map(str, sys.version_info[:3]))
    return (
        f"measured on Python {'.'.join(map(str, measured_on))} only, this is Python {shown}: "
        "left as Python sets it"
    )


# How `inspect.findsource` finds a function's first line (its decorators', if any).
_DEFINITION = re.compile(r"^(\s*def\s)|(\s*async\s+def\s)|(.*(?<!\w)lambda(:|\s))|^(\s*@)")


def source_digest(function: Callable[..., Any]) -> str:
    """The sha256 of a function's source, as written (a patched one: the original's): the
    text `inspect.getsource` gives, its first line found as `inspect` finds it, its last the
    end of its last expression (the code's own positions). `inspect.getsource` tokenizes the
    function to find its end (compiling the tokenizer's patterns first) and walks every
    module loaded to find its file: 4-13 ms of a console's start, before its first frame,
    against ~1 ms. OSError or TypeError when there is no source."""
    original = inspect.unwrap(function)
    if not inspect.isfunction(original):
        raise TypeError(f"{original!r} is not a function written in Python")
    code = original.__code__
    linecache.checkcache(code.co_filename)
    lines = linecache.getlines(code.co_filename, original.__globals__)
    first, last = code.co_firstlineno - 1, _last_line(code)
    if not 0 <= first < last <= len(lines):
        raise OSError(f"the source of {original.__qualname__} is not in {code.co_filename}")
    while first > 0 and not _DEFINITION.match(lines[first]):
        first -= 1
    if last == code.co_firstlineno:  # all on its first line, or a docstring alone: its
        text = inspect.getsource(original)  # code cannot say where it ends
    else:
        text = "".join(lines[first:last])
    return hashlib.sha256(text.encode()).hexdigest()


def _last_line(code: CodeType) -> int:
    """The last line (from 1) any expression of `code` or of a function inside it reaches."""
    ends = [end for _, end, _, _ in code.co_positions() if end is not None]
    inner = [_last_line(c) for c in code.co_consts if isinstance(c, CodeType)]
    return max([code.co_firstlineno, *ends, *inner])


@functools.cache
def textual_version() -> str | None:
    """The installed Textual's version: the `Version:` of the `textual-*.dist-info` beside the
    package, one small file read (importlib.metadata imports email, csv and zipfile and scans
    every path entry first: ~10 ms of a console's start, before its first frame); from
    importlib.metadata when there is no such folder (an editable or zipped install)."""
    import textual

    site = Path(textual.__file__).parent.parent  # as imported: its dist-info is beside it
    for folder in site.glob("textual-*.dist-info"):
        try:
            with (folder / "METADATA").open(encoding="utf-8") as header:
                for line in header:
                    if line.startswith("Version:"):
                        return line.split(":", 1)[1].strip()
                    if not line.strip():  # the end of the headers
                        break
        except OSError:
            continue
    from importlib import metadata

    try:
        return metadata.version("textual")
    except metadata.PackageNotFoundError:
        return None


def _major_minor(version: str) -> tuple[int, int] | None:
    found = re.match(r"(\d+)\.(\d+)", version)
    return (int(found[1]), int(found[2])) if found else None


def textual_refusal(
    versions: tuple[tuple[int, int], tuple[int, int]],
    written_against: Mapping[str, tuple[Callable[..., Any], str]],
) -> str | None:
    """None if the installed Textual is in `versions` (from, up to but not including) and
    each replaced function (by name: the function and its source's digest) is unchanged."""
    installed = textual_version()
    if installed is None:
        return "Textual's version cannot be read (no distribution metadata)"
    low, high = versions
    release = _major_minor(installed)
    if release is None or not low <= release < high:
        shown = f">={low[0]}.{low[1]},<{high[0]}.{high[1]}"
        return f"written for Textual {shown}, this is Textual {installed}"
    for name, (function, digest) in written_against.items():
        try:
            found = source_digest(function)
        except (OSError, TypeError) as exc:
            return f"the source of {name} cannot be read to compare ({exc})"
        if found != digest:
            return f"{name} is not the code this was written against (Textual {installed})"
    return None
