"""What a permitted ACP call lets loopdeck write for the agent unasked (`fs/write_text_file`):
each file it names, once, in its turn, with the whole content the permission showed: the file
as it is with the call's diffs applied (a diff's old text replaced by its new, its new text
for a new file), else its input's content. A write of anything else is asked on its own
(`calls.AcpCalls.write`): the operator approved a change, not whatever the agent sends next.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

from loopdeck.acp_env.bridge import OutsideWorkdir, inside

NOT_PERMITTED = object()  # no permission covers the file (this turn)
PATH_KEYS = ("path", "file_path", "filePath")  # where an agent's input names its file


def permitted_writes(workdir: Path, tool_call: Any) -> dict[Path, str | None]:
    """The files a permitted call names, each with the content it may be written with (None:
    the permission named the file and showed no content). A file whose diff cannot be
    applied to it as it is (its old text not in it) is left out: its write is asked."""
    raw = tool_call.raw_input if isinstance(tool_call.raw_input, dict) else {}
    content = raw.get("content") if isinstance(raw.get("content"), str) else None
    named: dict[Path, str | None] = {}
    paths = [str(loc.path) for loc in (tool_call.locations or [])]
    paths += [
        raw[key] for key in ("path", "file_path", "filePath") if isinstance(raw.get(key), str)
    ]
    for path in paths:
        with contextlib.suppress(OutsideWorkdir):
            named[inside(workdir, path)] = content
    edited: dict[Path, str | None] = {}
    for item in tool_call.content or []:
        if getattr(item, "type", "") != "diff":
            continue
        try:
            target = inside(workdir, str(item.path))
        except OutsideWorkdir:
            continue
        before = edited[target] if target in edited else _text_of(target)
        edited[target] = _applied(before, item.old_text, str(item.new_text))
    unknown = {target for target, text in edited.items() if text is None}
    found = {**named, **edited}
    return {target: text for target, text in found.items() if target not in unknown}


def _text_of(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def _applied(before: str | None, old: str | None, new: str) -> str | None:
    """A file's text with one diff applied (every place its old text is, as an edit with
    replace_all does); None when it cannot be told (the old text is not in it)."""
    if not old:
        return new  # a new file, or one written whole
    if before is None or old not in before:
        return None
    return before.replace(old, new)
