"""Text that is safe to store, to show an operator, and to hand a model: escaped and capped."""

from __future__ import annotations

import json
import re
import unicodedata
from datetime import datetime

TRUNCATION_MARK = " …[truncated {} chars]"

# `json.dumps(value, ensure_ascii=False, default=str)`, without building an encoder per call
# (`dumps` makes one whenever an option is given). The encoder keeps no state between calls.
json_text = json.JSONEncoder(ensure_ascii=False, default=str).encode

_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
# C0/C1 controls (except newline and tab), and the bidi overrides and isolates that can make
# a terminal show text in another order than it is stored.
_INVISIBLE = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2066-\u2069\ufeff]"
)


def escape_surrogates(text: str) -> str:
    """Lone surrogates cannot be encoded as UTF-8: keep them visible as `\\udXXX` text."""
    if not _LONE_SURROGATE.search(text):
        return text
    return _LONE_SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def storable(text: str) -> str:
    """NFC-normalized and encodable: the form every string of a canonical value takes."""
    return unicodedata.normalize("NFC", escape_surrogates(text))


def visible(text: str) -> str:
    """For the operator's terminal: controls and bidi characters shown as escapes, not obeyed."""
    text = escape_surrogates(text)
    if not _INVISIBLE.search(text):
        return text
    return _INVISIBLE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


# One line of a text box: its line breaks and tabs are not obeyed either.
_NOT_IN_A_LINE = re.compile(f"[\t\n{_INVISIBLE.pattern[1:-1]}\ud800-\udfff]")


def visible_in_place(text: str) -> str:
    """For a text box being typed in: each control, bidi character or lone surrogate shown as
    one U+FFFD, so the text keeps its length and a cursor counted in characters its place."""
    return _NOT_IN_A_LINE.sub("\ufffd", text)


def capped(text: str, cap: int) -> str:
    """At most `cap` characters of the text, with the visible truncation mark when cut."""
    if len(text) <= cap:
        return text
    return text[:cap] + TRUNCATION_MARK.format(len(text) - cap)


def visible_json(value: object, indent: int | None = 2) -> str:
    """JSON for the operator's eyes: readable non-ASCII, but nothing that steers the terminal."""
    if indent is None:
        return visible(json_text(value))
    return visible(indented_json(value, indent))


# `json.dumps(indent=...)` uses the pure-Python encoder, whose nested closures refer to each
# other: every call left a cycle of ~30 objects for the collector, and the console formats a
# call's arguments and result for each call it shows. This writes the same text with no cycle.
_one_line = json.JSONEncoder(ensure_ascii=False, default=str, check_circular=False).encode


def indented_json(value: object, indent: int = 2) -> str:
    """Exactly `json.dumps(value, indent=indent, ensure_ascii=False, default=str)`."""
    parts: list[str] = []
    try:
        _indent_into(parts, value, "\n", " " * indent, 0)
    except _NotPlain:
        return json.dumps(value, indent=indent, ensure_ascii=False, default=str)
    return "".join(parts)


class _NotPlain(Exception):
    """A key that is not a string, or nesting too deep: left to `json.dumps` itself."""


def _indent_into(parts: list[str], value: object, newline: str, step: str, depth: int) -> None:
    if isinstance(value, dict):
        keyed, brackets = True, "{}"
    elif isinstance(value, list | tuple):
        keyed, brackets = False, "[]"
    else:
        parts.append(_one_line(value))
        return
    if not value:
        parts.append(brackets)
        return
    if depth > 100:
        raise _NotPlain
    inner = newline + step
    parts.append(brackets[0])
    for i, item in enumerate(value.items() if keyed else value):  # type: ignore[union-attr]
        parts.append(inner if i == 0 else "," + inner)
        if keyed:
            key, item = item
            if not isinstance(key, str):
                raise _NotPlain
            parts.append(_one_line(key))
            parts.append(": ")
        _indent_into(parts, item, inner, step, depth + 1)
    parts.append(newline + brackets[1])


def short_args(args: dict[str, object], width: int = 34) -> str:
    """`key=value, …` on one line, visible, cut to `width` with an ellipsis."""
    text = visible(", ".join(f"{k}={v!r}" for k, v in args.items()))
    return text if len(text) <= width else text[: width - 1] + "…"


def plural(count: int, word: str) -> str:
    """`1 transition`, `2 transitions`."""
    return f"{count:,} {word}" if count == 1 else f"{count:,} {word}s"


def number(value: float) -> str:
    """A count or an amount for a person: `10,000,000`, `0.5`, never `1e+07`."""
    if float(value).is_integer():
        return f"{int(value):,}"
    return f"{value:,.4f}".rstrip("0").rstrip(".")


def moment_words(moment: datetime, now: datetime | None = None) -> str:
    """A time for a person who may read it elsewhere (a phone, another zone, the next day):
    local, with its UTC offset, and its date when not today: `14:08:01 UTC+02:00`,
    `2026-12-05 14:08:01 UTC+02:00`."""
    local = moment.astimezone()
    today = (now or datetime.now(local.tzinfo)).astimezone(local.tzinfo).date()
    offset = int((local.utcoffset() or local - local).total_seconds()) // 60
    sign, offset = "+" if offset >= 0 else "-", abs(offset)
    zone = f"UTC{sign}{offset // 60:02d}:{offset % 60:02d}"
    shown = local.strftime("%H:%M:%S" if local.date() == today else "%Y-%m-%d %H:%M:%S")
    return f"{shown} {zone}"
