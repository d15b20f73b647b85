"""A tool use as the operator sees it and as the workspace watch reads it: how it is labelled
(`Write: src/calc.py`, `Bash: pytest -q`), the diff an edit of a file in the folder makes (the
file read as it is now), and the files it names (what a permitted call explains when they
change; None: it may change anything, a command or a patch that names no file).

Agents name these fields differently: Claude Code `file_path`, `old_string`, `new_string`;
opencode `filePath`, `oldString`, `newString`; Codex's `apply_patch` a patch whose `*** Update
File:` lines name its files, its `shell` a `command` list.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from loopdeck.core.text import capped
from loopdeck.core.write_diff import READ_CAP, file_diff, written_file
from loopdeck.workdir.tree import relative

PATH_FIELDS = ("file_path", "filePath", "path", "notebook_path", "absolute_path")
OLD_FIELDS = ("old_string", "oldString")
NEW_FIELDS = ("new_string", "newString")
CONTENT_FIELDS = ("content", "text")
LABEL_FIELDS = (*PATH_FIELDS, "command", "cmd", "pattern", "url", "query", "description")
PATCH_FILE = re.compile(r"^\*\*\* (?:Add File|Update File|Delete File|Move to): (.+)$", re.M)
LABEL_CAP = 120
DIFF_CAP = 6000


def label(value: dict[str, Any] | str) -> str:
    """What the tool use acts on, in a line: its file, command, pattern or first line."""
    if isinstance(value, str):
        first = value.strip().splitlines()[0] if value.strip() else ""
        return capped(first, LABEL_CAP) or "(no input)"
    for name in LABEL_FIELDS:
        field = value.get(name)
        if isinstance(field, list) and all(isinstance(part, str) for part in field):
            field = " ".join(field)
        if isinstance(field, str) and field.strip():
            return capped(" ".join(field.split()), LABEL_CAP)
    return "(no input)"


def _field(value: dict[str, Any], names: tuple[str, ...]) -> Any:
    return next((value[name] for name in names if name in value), None)


def named_paths(value: dict[str, Any] | str, workdir: Path) -> set[str] | None:
    """The folder's files the tool use names, relative; None: it may change any of them."""
    text = value if isinstance(value, str) else _field(value, ("input", "patch"))
    if isinstance(text, str) and (found := PATCH_FILE.findall(text)):
        return {relative(path.strip(), workdir) for path in found}
    if isinstance(value, dict):
        path = _field(value, PATH_FIELDS)
        if isinstance(path, str) and path and not _is_command(value):
            return {relative(path, workdir)}
    return None


def _is_command(value: dict[str, Any]) -> bool:
    return any(name in value for name in ("command", "cmd"))


def diff_of(value: dict[str, Any] | str, workdir: Path) -> str:
    """The change the tool use makes to a file in the folder, as a unified diff ("" when it
    edits none that can be shown, or when the approval shows it already: a whole file's
    `path`/`file_path` and `content`, `core/write_diff.py`'s). Reads the file: run off the
    event loop."""
    if isinstance(value, str) or isinstance(_field(value, ("input", "patch")), str):
        text = value if isinstance(value, str) else _field(value, ("input", "patch"))
        return capped(text, DIFF_CAP) if PATCH_FILE.search(text) else ""
    path = _field(value, PATH_FIELDS)
    if not isinstance(path, str) or not path or written_file(value) is not None:
        return ""
    name = relative(path, workdir)
    target = workdir / name
    if Path(name).is_absolute() or name.startswith("../"):
        return ""  # outside the folder: nothing here to show it against
    old = _read(target)
    edits = value.get("edits")
    new = old
    for edit in edits if isinstance(edits, list) else [value]:
        new = _edited(new, edit) if isinstance(edit, dict) else new
    if new is old:
        content = _field(value, CONTENT_FIELDS)
        if not isinstance(content, str):
            return ""
        new = content
    return file_diff(name, old, new or "")


def _edited(text: str | None, edit: dict[str, Any]) -> str | None:
    old, new = _field(edit, OLD_FIELDS), _field(edit, NEW_FIELDS)
    if not isinstance(old, str) or not isinstance(new, str) or text is None or old not in text:
        return text
    every = bool(edit.get("replace_all") or edit.get("replaceAll"))
    return text.replace(old, new) if every else text.replace(old, new, 1)


def _read(target: Path) -> str | None:
    try:
        if not target.is_file() or target.stat().st_size > READ_CAP:
            return None
        return target.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
