"""`goal_check` of an MCP env's `scenario.toml`: a command run in the working copy, off the
event loop (on the env thread, where `unmet` runs), in a process group of its own, bounded.

Python's bytecode cache is a fresh folder of the check's own (`PYTHONPYCACHEPREFIX`): a
`__pycache__` the agent forged in the working copy is never what the check imports.

Exit 0: the goal is met. Exit 1: not met, each non-empty stdout line a reason (none: "the
goal check says not met"). Anything else (not found, another exit code, a signal, past its
timeout) is the check failing: the run stops `tool_failure`, naming the check, with the tail
of its stderr.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import tempfile
from pathlib import Path

from loopdeck.core.control import StopRun
from loopdeck.core.states import StopReason
from loopdeck.core.text import capped, visible
from loopdeck.workdir.agent_command import child_environment

TAIL_CHARS = 600
REASONS_KEPT = 50


def stderr_tail(text: str) -> str:
    """The end of what a process said on stderr, one line, shown as text."""
    text = visible(text.strip().replace("\n", " ⏎ "))
    return text if len(text) <= TAIL_CHARS else "…" + text[-TAIL_CHARS:]


def run_goal_check(command: list[str], workdir: Path, timeout_s: float) -> list[str]:
    """The unmet reasons; [] when met. Raises `StopRun` when the check itself fails."""
    shown = " ".join(command)
    with tempfile.TemporaryDirectory(prefix="loopdeck-pycache-") as cache:
        return _run(command, shown, workdir, timeout_s, check_environment(cache))


def check_environment(cache: str) -> dict[str, str]:
    """The check's environment: loopdeck's, Python's bytecode read from and written to
    `cache` (a fresh folder) only: a `__pycache__` in the working copy (which the tree does
    not watch) is never run in place of its source, and none is written there."""
    return child_environment({"PYTHONPYCACHEPREFIX": cache, "PYTHONDONTWRITEBYTECODE": "1"})


def _run(
    command: list[str], shown: str, workdir: Path, timeout_s: float, env: dict[str, str]
) -> list[str]:
    try:
        proc = subprocess.Popen(
            command,
            env=env,
            cwd=workdir,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
            errors="replace",
            start_new_session=True,
        )
    except OSError as exc:
        raise StopRun(
            StopReason.TOOL_FAILURE, f"goal check `{shown}` could not start: {exc}"
        ) from exc
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        _, err = proc.communicate()
        raise StopRun(
            StopReason.TOOL_FAILURE,
            f"goal check `{shown}` did not end within {timeout_s:g}s; stderr: {stderr_tail(err)}",
        ) from None
    if proc.returncode == 0:
        return []
    if proc.returncode == 1:
        lines = [capped(visible(line.strip()), 500) for line in out.splitlines() if line.strip()]
        return lines[:REASONS_KEPT] or ["the goal check says not met"]
    how = (
        f"exited {proc.returncode}" if proc.returncode > 0 else f"died by signal {-proc.returncode}"
    )
    raise StopRun(
        StopReason.TOOL_FAILURE, f"goal check `{shown}` {how}; stderr: {stderr_tail(err)}"
    )


def _kill_group(proc: subprocess.Popen[str]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
