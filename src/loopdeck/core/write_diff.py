"""A write of a file's content, shown as what it changes: a unified diff against the file as
it is in the working copy (a new file's lines all added), for the operator deciding on it.

A call writes a file when its arguments name one (`path`, `file_path`, `filePath`) and give
its content (`content`, `text`), both strings, or edit it: an old and a new string
(`old_string`/`new_string` as Claude Code says them, `oldString`/`newString` as opencode does;
the old found exactly once, or every place with `replace_all`/`replaceAll`), or a list of them
(`edits`, in order), applied to the file as it is (`told_content`: the one reading of such an
input, the ACP kind's and the gateway's alike) as Claude Code's Edit applies it
(`replaced_as_claude_code`: in the file's own line endings, an emptied line taken out
whole). `file_diff` is pure; `write_diff` reads the file, so it runs off the event loop
(`asyncio.to_thread`). A file is read to be diffed only when it is a regular file (opened
`O_NONBLOCK`: a FIFO at the path is refused, never waited on) of at most `READ_CAP` bytes
(`current_text`): else the diff says why none is shown.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Callable
from pathlib import Path
from stat import S_ISREG
from typing import Any

from loopdeck.core.text import capped

PATH_FIELDS = ("path", "file_path", "filePath")
CONTENT_FIELDS = ("content", "text")
OLD_FIELDS = ("old_string", "oldString")
NEW_FIELDS = ("new_string", "newString")
ALL_FIELDS = ("replace_all", "replaceAll")
SILENT = object()  # an input that says nothing of its file's content
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
    """The diff a call's write or edit makes in the working copy ("" when the call changes
    no file, or one outside the working copy); reads the file."""
    path = next((args[f] for f in PATH_FIELDS if isinstance(args.get(f), str)), None)
    if not path:
        return ""
    root = workdir.resolve()
    target = (root / path).resolve()
    if not target.is_relative_to(root) or target == root:
        return ""
    name = target.relative_to(root).as_posix()
    read: list[str | None] = []

    def before() -> str | None:  # read only for an edit: an input naming a file may not be one
        read.append(current_text(target, name, line_ends=True))
        return read[0]

    try:
        if (written := written_file(args)) is not None:
            return file_diff(name, current_text(target, name), written[1])
        new = told_content(args, before, replaced_as_claude_code)
    except Undiffable as exc:
        return str(exc)
    if new is None:
        return f"{name}: the edit's old text is not in it once as it is now; no diff shown"
    return file_diff(name, read[0], new) if isinstance(new, str) and read else ""


def told_content(
    args: dict[str, Any],
    before: Callable[[], str | None],
    replace: Callable[[str | None, str, str, bool], str | None] | None = None,
) -> Any:
    """The content an input says its file will hold: its `content`; its edit (or `edits`, in
    order) applied to the file's text as `before()` reads it (`replace`: how, `replaced`
    unless given). None: it cannot be told (an edit does not apply); SILENT: it says
    neither."""
    replace = replace or replaced
    if isinstance(args.get("content"), str):
        return args["content"]
    given = args.get("edits")
    listed: list[Any] = given if isinstance(given, list) else [args]
    edits = [edit for edit in listed if isinstance(edit, dict) and edit_strings(edit) is not None]
    if not edits:
        return SILENT
    text = before()
    for edit in edits:
        old, new = edit_strings(edit) or ("", "")
        every = any(edit.get(key) is True for key in ALL_FIELDS)
        text = replace(text, old, new, every)
        if text is None:  # the edits fail as a whole (MultiEdit): a later one is no new file
            return None
    return text


def edit_strings(edit: dict[str, Any]) -> tuple[str, str] | None:
    """An edit's old and new strings, or None when it has not both."""
    old = next((edit[key] for key in OLD_FIELDS if isinstance(edit.get(key), str)), None)
    new = next((edit[key] for key in NEW_FIELDS if isinstance(edit.get(key), str)), None)
    return None if old is None or new is None else (old, new)


def replaced(before: str | None, old: str, new: str, every: bool) -> str | None:
    """An edit as the agent's tool does it: the old text found exactly once (or, `every`,
    anywhere) replaced by the new; an empty old text makes a new file. None: cannot be told."""
    if not old:
        return new if before is None else None
    if before is None:
        return None
    found = before.count(old)
    if found == 0 or (found > 1 and not every):
        return None
    return before.replace(old, new)


def replaced_as_claude_code(before: str | None, old: str, new: str, every: bool) -> str | None:
    """An edit as Claude Code's Edit does it, where that differs from `replaced`: in the
    file's own line endings (the edit made with `\n` and written back with the file's `\r\n`),
    and an empty new text taking the line's end with it (a line deleted, not left blank)."""
    if before is None or not old:
        return replaced(before, old, new, every)
    crlf = "\r\n" in before
    text = before.replace("\r\n", "\n") if crlf else before
    old, new = old.replace("\r\n", "\n"), new.replace("\r\n", "\n")
    if not new and not old.endswith("\n") and old + "\n" in text:
        old += "\n"  # a deleted line goes with its end
    done = replaced(text, old, new, every)
    if done is None:
        return None
    return done.replace("\n", "\r\n") if crlf else done


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
