"""The whole content a permission showed the operator for each file it names: what a permitted
ACP call may have loopdeck write for it unasked (`fs/write_text_file`, once, in its turn), and
what the file must hold when the call ends (`core/workspace_changes.py`), for agents that
write their files themselves (Codex, opencode's shell).

A file's content is told by the call as the operator was shown it (its proposal and its
permission request, `shown_contents`): its diffs applied to the file as it is (a diff's old
text, found once, replaced by its new; no old text: its new text, a new file), its input's
`content`, or its input's old and new strings (`old_string`/`new_string` as Claude Code says
them, `oldString`/`newString` as opencode does; the old found exactly once, or every place
with `replace_all`/`replaceAll`; read as `core/write_diff.told_content` reads it, the
gateway's approvals too). It cannot be told when the call shows none of these for
the file, when a diff or an edit cannot be applied to the file as it is (its old text not in
it, or an edit's in it more than once), or when two of them disagree: then nothing is
permitted unasked (a write is asked on its own, `file_writes.py`) and the file's content
when the call ends cannot be checked against what was approved (said so in a finding).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from loopdeck.acp_env.bridge import OutsideWorkdir, inside
from loopdeck.acp_env.call_input import PATH_KEYS
from loopdeck.core.write_diff import (
    SILENT,
    Undiffable,
    current_text,
    file_diff,
    replaced_as_claude_code,
    told_content,
)

# An agent's diff for a file it deletes (Codex: `_meta.kind` "delete"): no content to hold.
DELETED = "delete"


def shown_contents(workdir: Path, *calls: Any) -> dict[Path, str | None]:
    """Every file the calls name, each with the whole content shown for it (None: it cannot
    be told)."""
    told: dict[Path, list[Any]] = {}
    for call in calls:
        if call is None:
            continue
        for target, text in _told(workdir, call):
            told.setdefault(target, []).append(text)
    return {target: _one(texts) for target, texts in told.items()}


def permitted_writes(workdir: Path, *calls: Any) -> dict[Path, str]:
    """The files loopdeck may write unasked for a permitted call: each with the content shown
    for it, once. A file whose content cannot be told is left out: its write is asked."""
    return {
        target: text
        for target, text in shown_contents(workdir, *calls).items()
        if isinstance(text, str)
    }


def shown_diff(workdir: Path, *calls: Any) -> str:
    """The change the calls show, as the operator deciding on them is shown it (the request's
    `diff`: `loopdeck pending`, the approval dialog): for each file whose whole content they
    tell, the file as it is now against that content, a unified diff; "" when they tell none."""
    root = workdir.resolve()
    said = []
    for target, text in shown_contents(workdir, *calls).items():
        if isinstance(text, str):
            name = target.relative_to(root).as_posix()
            try:
                diff = file_diff(name, current_text(target, name, line_ends=True), text)
            except Undiffable as exc:  # a FIFO, a file past the cap: why no diff is shown
                diff = str(exc)
            said.append(diff if diff.endswith("\n") else diff + "\n")
    return "".join(said)


def held_to(
    workdir: Path, root: Path, named: set[str], *calls: Any
) -> tuple[dict[str, str | None], dict[str, str], dict[Path, set[str]]]:
    """What a permitted call's files are held to (`ChangeWatch.permit`): each named file's
    shown content's hash (None: cannot be told), the hash of the same edit as Claude Code
    makes it, and the contents loopdeck may write for it unasked."""
    as_claude = edited_as_claude_code(workdir, *calls)
    expected: dict[str, str | None] = dict.fromkeys(named)
    also: dict[str, str] = {}
    writes: dict[Path, set[str]] = {}
    for target, text in shown_contents(workdir, *calls).items():
        rel = target.relative_to(root).as_posix()
        expected[rel] = None if text is None else text_digest(text)
        if text is not None:
            writes[target] = {text, as_claude.get(target, text)}
            if (other := text_digest(as_claude.get(target, text))) is not None:
                also[rel] = other
    return expected, also, writes


def edited_as_claude_code(workdir: Path, *calls: Any) -> dict[Path, str]:
    """The content an old/new-string edit leaves as Claude Code's Edit does it, where that
    differs from a plain replacement: in the file's own line endings (the edit made with
    `\n` and written back with the file's `\r\n`), and an empty new text taking the line's
    end with it (a line deleted, not left blank). Either content is the one shown."""
    told: dict[Path, str] = {}
    for call in calls:
        raw = getattr(call, "raw_input", None) if call is not None else None
        if not isinstance(raw, dict) or isinstance(raw.get("content"), str):
            continue
        path = next((raw[key] for key in PATH_KEYS if isinstance(raw.get(key), str)), None)
        target = None if path is None else _within(workdir, path)
        text = None if target is None else _input_content(raw, target, replaced_as_claude_code)
        if target is not None and isinstance(text, str):
            told[target] = text
    return told


def text_digest(text: str) -> str | None:
    """A content's hash as the working copy's snapshot says it (`workdir/tree.py`)."""
    try:
        return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]
    except UnicodeEncodeError:
        return None


def _one(texts: list[Any]) -> str | None:
    said = [text for text in texts if text is not SILENT]
    if not said or any(text is None for text in said) or len(set(said)) != 1:
        return None
    return str(said[0])


def _told(workdir: Path, call: Any) -> list[tuple[Path, Any]]:
    """What one call says of each file it names: its content, None (cannot be told: its diff
    or edit does not apply), or SILENT."""
    raw = call.raw_input if isinstance(call.raw_input, dict) else {}
    named = [str(loc.path) for loc in (call.locations or [])]
    keyed = [raw[key] for key in PATH_KEYS if isinstance(raw.get(key), str)]
    told: list[tuple[Path, Any]] = []
    for path in named + keyed:
        told += _at(workdir, path, SILENT)
    # The input's content or edit is its named file's (or its only location's).
    own = keyed[:1] or (named if len(named) == 1 else [])
    for path in own:
        told += _at(workdir, path, _input_content(raw, _within(workdir, path)))
    edited: dict[Path, Any] = {}
    for item in call.content or []:
        if getattr(item, "type", "") != "diff":
            continue
        try:
            target = inside(workdir, str(item.path))
        except OutsideWorkdir:
            continue
        before = edited[target] if target in edited else _text_of(target)
        edited[target] = _diff_applied(before, item)
    return told + list(edited.items())


def _at(workdir: Path, path: str, text: Any) -> list[tuple[Path, Any]]:
    target = _within(workdir, path)
    return [] if target is None else [(target, text)]


def _within(workdir: Path, path: str) -> Path | None:
    try:
        return inside(workdir, path)
    except OutsideWorkdir:
        return None


def _input_content(
    raw: dict[str, Any], target: Path | None, replace: Callable[..., str | None] | None = None
) -> Any:
    """The content an input says its file will hold (`core/write_diff.told_content`), its
    edits applied to the file as it is."""
    return told_content(raw, lambda: None if target is None else _text_of(target), replace)


def _diff_applied(before: Any, item: Any) -> Any:
    """A file's text with one more diff applied: its old text, found once, replaced by its
    new; a new file's new text; SILENT where a diff cannot say (its old text in the file more
    than once, or a file deleted); None where it cannot be applied (its old text not in it)."""
    meta = getattr(item, "field_meta", None)
    if before is SILENT or (isinstance(meta, dict) and meta.get("kind") == DELETED):
        return SILENT
    old, new = item.old_text, str(item.new_text or "")
    if not old:
        return new  # a new file, or one written whole
    if before is None or old not in before:
        return None
    if before.count(old) > 1:
        return SILENT
    return str(before).replace(old, new)


def _text_of(path: Path) -> str | None:
    """The file's text as it is on disk (its line endings as they are), read whole (what it
    must hold is checked whole); None where it is not there or is no regular file's text
    (`core/write_diff.current_text`: a FIFO refused, never waited on): an edit of it
    cannot be told."""
    try:
        return current_text(path, path.name, line_ends=True, cap=None)
    except Undiffable:
        return None
