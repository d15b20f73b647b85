"""A tool use as the operator sees it and as the workspace watch reads it: how it is labelled
(`Write: src/calc.py`, `Bash: pytest -q`), a patch's text (the approval's own diff shows a
file written whole or edited by old and new strings, `core/write_diff.py`, the ACP kind's
reading of them), and the files it names (what a permitted call explains when they change;
None: it may change anything, a command or a patch that names no file).

Agents name these fields differently: Claude Code `file_path`, `old_string`, `new_string`;
opencode `filePath`, `oldString`, `newString`; Codex's `apply_patch` a patch whose `*** Update
File:` lines name its files, its `shell` a `command` list.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from loopdeck.core.text import capped
from loopdeck.workdir.tree import relative

PATH_FIELDS = ("file_path", "filePath", "path", "notebook_path", "absolute_path")
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


def diff_of(value: dict[str, Any] | str) -> str:
    """A patch the tool use carries (Codex's `apply_patch`), as it was sent: its own diff. Any
    other change is the approval's own diff (`Environment.write_diff`): "" here."""
    text = value if isinstance(value, str) else _field(value, ("input", "patch"))
    return capped(text, DIFF_CAP) if isinstance(text, str) and PATCH_FILE.search(text) else ""
