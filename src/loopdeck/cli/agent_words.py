"""What `loopdeck acp` and `loopdeck gateway` both check of their words before a run is made:
the folder the agent works in and its command; and how a refusal is said (once, on stderr,
shown `visible`: the words are the user's)."""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path


def folder_and_command_problem(args: argparse.Namespace) -> str | None:
    """`--workdir` is a folder that is there, and the agent's command is found on PATH; else
    what is wrong, in one line."""
    workdir: Path = args.workdir
    if not workdir.exists():
        return f"--workdir {workdir}: no such folder"
    if not workdir.is_dir():
        return f"--workdir {workdir}: not a folder"
    program = args.agent_command[0]
    if shutil.which(program) is None:
        return f"the agent's command {program}: not found (nor runnable) on PATH"
    return None


def said_refused(problem: str | None) -> bool:
    """Says `problem` and returns True; False when there is none."""
    if problem is None:
        return False
    from loopdeck.core.text import visible

    print(f"loopdeck: {visible(problem)}", file=sys.stderr)
    return True
