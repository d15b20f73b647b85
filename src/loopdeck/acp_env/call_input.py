"""An agent's tool call as the operator judges it and the guard keys it.

What the operator sees and approves is the whole input the agent sent: nothing left out, and
nothing taken past the one cap on a call's arguments, the runtime's (`MAX_ARGUMENTS_CHARS`, as
JSON: a model's arguments past it are refused). Past it, an input is never shown in part (nobody
approves what they could not see whole): it is recorded by its digest and its size, and a call
that asks is refused by loopdeck, by name (`past_cap`). The guard keys it less what the agent
renews on every call (`workdir/volatile.py`'s `steady`: per-call ids and times by name, and the
agent's own list in `[agent] volatile`), hashed whole.

Real agents differ here. Codex's adapter (0.16) put its `call_id`, `process_id`, `turn_id`
and `started_at_ms` in the input: keyed as sent, six identical `cat calc.py` from one state
would be six calls and the guard would never trip. Gemini CLI sends no `rawInput` at all: such
a call is shown and keyed by what it shows (its locations, diffs, text). Codex's adapter (2.6)
sends neither input nor anything shown for its commands (`ls` and `ls -la` are both "List
files", `{}`): nothing known is "cannot tell", never "the same", so such a call is keyed on its
own id and is no one's repeat.
"""

from __future__ import annotations

import contextlib
import difflib
import hashlib
from pathlib import Path
from typing import Any

from loopdeck.core.canonical import canonical_json, sha256_hex
from loopdeck.core.decisions import MAX_ARGUMENTS_CHARS
from loopdeck.core.text import capped
from loopdeck.workdir.tree import relative
from loopdeck.workdir.volatile import steady

DIFF_CAP = 2000  # a diff side's text kept in what the operator sees; the key hashes it whole
KEY_CAP = 4_000  # a key's JSON past this is kept (in the guard's memory) as its hash
# Where an agent's input names the file it works on (Claude Code: `file_path`, `notebook_path`;
# opencode: `filePath`, `filepath` in its permissions; Gemini CLI: `absolute_path`): the one
# list the files a call names are read by (`named_paths`, `permitted_writes.py`).
PATH_KEYS = ("path", "file_path", "filePath", "filepath", "absolute_path", "notebook_path")
NOTHING_TO_JUDGE = (
    "the agent sent nothing to judge this call by: no input, no locations, no diff; only its title"
)


def shown_input(call: Any, workdir: Path) -> dict[str, Any]:
    """A call with no input, as the agent shows it: its locations and its diffs (each side's
    hash, and its text capped for the operator)."""
    shown: dict[str, Any] = {}
    locations = [relative(str(loc.path), workdir) for loc in (call.locations or [])]
    if locations:
        shown["locations"] = locations
    diffs = []
    for item in call.content or []:
        if getattr(item, "type", "") == "diff":
            diffs.append(_diff(item, workdir))
    if diffs:
        shown["diffs"] = diffs
    texts = [
        text
        for item in call.content or []
        if getattr(item, "type", "") == "content"
        and (text := getattr(getattr(item, "content", None), "text", None))
    ]
    if texts:
        shown["content"] = capped("\n".join(texts), DIFF_CAP)
    return shown


def _diff(item: Any, workdir: Path) -> dict[str, Any]:
    old, new = item.old_text, item.new_text or ""
    return {
        "path": relative(str(item.path), workdir),
        "old_sha256": None if old is None else _sha(old),
        "new_sha256": _sha(new),
        "old_text": None if old is None else capped(old, DIFF_CAP),
        "new_text": capped(new, DIFF_CAP),
    }


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def named_paths(call: Any, workdir: Path, raw: Any) -> set[str]:
    """The working copy's files a call names (its locations, its diffs' paths, its input's
    path fields), relative: what a permission for it explains if they change."""
    named: list[str] = [str(loc.path) for loc in (call.locations or [])]
    for item in call.content or []:
        if getattr(item, "type", "") == "diff":
            named.append(str(item.path))
    if isinstance(raw, dict):
        for key in PATH_KEYS:
            if isinstance(raw.get(key), str):
                named.append(raw[key])
    return {relative(path, workdir) for path in named}


def judged(call: Any, workdir: Path, volatile: frozenset[str]) -> tuple[dict[str, Any], Any]:
    """The call's input as the operator judges it (all the agent sent; with nothing sent, or
    only fields it renews per call, what it shows too) and as the guard keys it (less what it
    renews per call; with no input, what it shows; None: nothing known)."""
    data = raw_input_of(call)
    keyed = steady(data, volatile)
    if keyed:
        return data, keyed
    shown = shown_input(call, workdir)
    return {**shown, **data}, shown or None


def raw_input_of(call: Any) -> dict[str, Any]:
    """The input the agent sent, as an object (none: `{}`; another value: under `input`)."""
    raw = call.raw_input
    return raw if isinstance(raw, dict) else ({} if raw is None else {"input": raw})


def key_form(keyed: dict[str, Any]) -> dict[str, Any]:
    """A key as the guard keeps it: a large one by its hash (the same input, the same hash)."""
    if len(canonical_json(keyed)) <= KEY_CAP:
        return keyed
    return {"input_sha256": sha256_hex(keyed)}


def past_cap(args: dict[str, Any]) -> str | None:
    """Why a call's input is not taken, in words naming its size and the cap (a model's
    arguments past it are refused alike, `core/decisions.py`); None within the cap."""
    size = len(canonical_json(args))
    if size <= MAX_ARGUMENTS_CHARS:
        return None
    return (
        f"its input is {size} characters as JSON; at most {MAX_ARGUMENTS_CHARS} are taken, as"
        " of a model's arguments"
    )


def not_taken(args: dict[str, Any], why: str) -> dict[str, Any]:
    """An input past the cap as stored and shown: its digest and why, never a part of it."""
    return {"input_sha256": sha256_hex(args), "not_taken": why}


def diff_text(update: Any, workdir: Path) -> str:
    """The call's diffs as one unified diff, for the operator deciding on it."""
    said: list[str] = []
    for item in getattr(update, "content", None) or []:
        if getattr(item, "type", "") != "diff":
            continue
        old, new = _lines(item.old_text), _lines(item.new_text)
        name = str(item.path)
        with contextlib.suppress(ValueError):  # named inside the working copy: said relative
            name = Path(name).resolve().relative_to(workdir.resolve()).as_posix()
        said.extend(difflib.unified_diff(old, new, f"a/{name}", f"b/{name}"))
    return capped("".join(said), 3000)


def _lines(text: str | None) -> list[str]:
    """A diff side's lines, the last one ended too: an agent's fragment (Claude Code's
    `return a - b`) often has no newline, and its `-` and `+` lines would run together."""
    lines = (text or "").splitlines(keepends=True)
    if lines and not lines[-1].endswith(("\n", "\r")):
        lines[-1] += "\n"
    return lines
