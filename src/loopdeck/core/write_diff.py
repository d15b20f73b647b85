"""A write of a file's content, shown as what it changes: a unified diff against the file as
it is in the working copy (a new file's lines all added), for the operator deciding on it.

A call writes a file when its arguments name one (`path`, `file_path`) and give its content
(`content`, `text`), both strings. `file_diff` is pure; `write_diff` reads the file, so it runs
off the event loop (`asyncio.to_thread`). A file is read to be diffed only when it is a regular
file (opened `O_NONBLOCK`: a FIFO at the path is refused, never waited on) of at most
`READ_CAP` bytes (`current_text`): else the diff says why none is shown.
"""

from __future__ import annotations

import difflib
import os
from pathlib import Path
from stat import S_ISREG
from typing import Any

from loopdeck.core.text import capped

PATH_FIELDS = ("path", "file_path")
CONTENT_FIELDS = ("content", "text")
DIFF_CAP = 6000  # what the request carries of a diff; the arguments keep the whole content
READ_CAP = 2 * 1024 * 1024  # a bigger file is not read to be diffed


def written_file(args: dict[str, Any]) -> tuple[str, str] | None:
    """The path a call writes and the content it writes there, or None if it writes none."""
    path = next((args[f] for f in PATH_FIELDS if isinstance(args.get(f), str)), None)
    content = next((args[f] for f in CONTENT_FIELDS if isinstance(args.get(f), str)), None)
    if not path or content is None:
        return None
    return path, content


def file_diff(name: str, old: str | None, new: str) -> str:
    """`new` written over `old` at `name` (None: the file is not there yet) as a unified
    diff."""
    if old == new:
        return f"{name}: unchanged (the file already holds exactly this content)"
    before = "/dev/null" if old is None else f"a/{name}"
    lines = difflib.unified_diff(_lines(old or ""), _lines(new), before, f"b/{name}")
    return capped("".join(lines), DIFF_CAP)


def write_diff(workdir: Path, args: dict[str, Any]) -> str:
    """The diff a call's write makes in the working copy ("" when the call writes no file,
    or one outside the working copy); reads the file."""
    written = written_file(args)
    if written is None:
        return ""
    path, content = written
    root = workdir.resolve()
    target = (root / path).resolve()
    if not target.is_relative_to(root) or target == root:
        return ""
    name = target.relative_to(root).as_posix()
    try:
        old = current_text(target, name)
    except Undiffable as exc:
        return str(exc)
    return file_diff(name, old, content)


class Undiffable(Exception):
    """A file a write's diff cannot be shown against: its words say why."""


def current_text(
    target: Path, name: str, *, line_ends: bool = False, cap: int | None = READ_CAP
) -> str | None:
    """The file's text now, to diff a write against (None: it is not there), its line ends
    as `\n` unless `line_ends` (as they are). `Undiffable`, naming `name`, when it is no
    regular file (opened `O_NONBLOCK`: a FIFO is refused, never waited on), is larger than
    `cap` bytes (None: read whole), is no UTF-8 text, or cannot be read."""
    try:
        fd = os.open(target, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise Undiffable(f"{name}: cannot be read for a diff ({exc.strerror or exc})") from None
    with open(fd, "rb") as file:
        try:
            if not S_ISREG(os.fstat(fd).st_mode):
                raise Undiffable(f"{name}: not a regular file; no diff shown")
            data = file.read(-1 if cap is None else cap + 1)
        except OSError as exc:
            said = f"{name}: cannot be read for a diff ({exc.strerror or exc})"
            raise Undiffable(said) from None
    if cap is not None and len(data) > cap:
        raise Undiffable(f"{name}: larger than {cap // 1024} KiB; no diff shown")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise Undiffable(f"{name}: not UTF-8 text now; the write replaces it whole") from None
    return text if line_ends else text.replace("\r\n", "\n").replace("\r", "\n")


def _lines(text: str) -> list[str]:
    """The text's lines, the last one ended too, so a diff's lines never run together."""
    lines = text.splitlines(keepends=True)
    if lines and not lines[-1].endswith(("\n", "\r")):
        lines[-1] += "\n"
    return lines
