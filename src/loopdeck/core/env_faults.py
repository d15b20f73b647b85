"""Env code that raised, said with where: its exception and the line of the env's own code
that raised it (`ZeroDivisionError: division by zero (env.py:57, in scale_service)`). Its
traceback, from the env's first frame on, goes to the logger `loopdeck.env` at DEBUG, which
`loopdeck check -v` prints."""

from __future__ import annotations

import inspect
import logging
import traceback
from pathlib import Path

log = logging.getLogger("loopdeck.env")


def home_of(code: object) -> Path | None:
    """The folder of the file that defines `code` (an env's class, a tool's method)."""
    try:
        source = inspect.getsourcefile(code)  # type: ignore[arg-type]
    except TypeError:  # built in, or made at run time
        return None
    return Path(source).resolve().parent if source else None


def _inside(filename: str, home: Path) -> Path | None:
    """The frame's file relative to `home`, if it is one of the env's own files."""
    try:
        return Path(filename).resolve().relative_to(home)
    except (ValueError, OSError):
        return None


def _own_frames(frames: traceback.StackSummary, home: Path | None) -> list[tuple[int, Path]]:
    """The frames of the env's own files: their index, and their file relative to `home`."""
    if home is None:
        return []
    found = []
    for index, frame in enumerate(frames):
        path = _inside(frame.filename, home)
        if path is not None:
            found.append((index, path))
    return found


def described(exc: BaseException, home: Path | None, label: str) -> str:
    """`Type: message`, with the innermost line under `home` that raised it; the traceback
    logged for whoever listens (`label` names what ran: "tool scale_service")."""
    said = f"{type(exc).__name__}: {exc}"
    frames = traceback.extract_tb(exc.__traceback__)
    own = _own_frames(frames, home)
    if own:
        index, path = own[-1]
        said += f" ({path.as_posix()}:{frames[index].lineno}, in {frames[index].name})"
    if log.isEnabledFor(logging.DEBUG):
        shown = traceback.TracebackException.from_exception(exc)
        if own:  # loopdeck's own frames above the env's say nothing to its author
            shown.stack = traceback.StackSummary.from_list(frames[own[0][0] :])
        log.debug("%s raised %s\n%s", label, said, "".join(shown.format()).rstrip())
    return said
