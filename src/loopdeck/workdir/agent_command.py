"""An agent's command as a run names it and starts it: its name (the program, not the launcher
in front of it: `npx -y @google/gemini-cli` is `gemini-cli`, `env HOME=/h claude -p` is
`claude`), and the values added to its
environment, `${VAR}` taken from loopdeck's own."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

LAUNCHERS = frozenset({"{python}", "python", "python3", "npx", "node", "uvx", "-y", "-m", "--yes",
                       "env", "-i", "nice", "nohup", "exec", "time", "bunx", "pnpx"})  # fmt: skip


class MissingVariable(ValueError):
    """A `${VAR}` in an agent's environment that loopdeck's own does not set."""


def command_name(command: list[str]) -> str:
    """`claude`, `codex`, `scripted_agent` (a module's last name), `gemini-cli` (no @version)."""
    named = next((part for part in command if not _launching(part)), command[0])
    last = named.rsplit("/", 1)[-1]
    last = re.sub(r"(?<=.)@[^@/]*$", "", last)  # an npm package's @version
    last = re.sub(r"\.(py|js|mjs|cjs|ts|sh|exe)$", "", last)
    return last.rsplit(".", 1)[-1]


def _launching(part: str) -> bool:
    """A word in front of the program: a launcher, its flag, or `env`'s `NAME=value`."""
    return Path(part).name in LAUNCHERS or re.fullmatch(r"[A-Za-z_]\w*=.*", part) is not None


def expanded(values: Mapping[str, str], where: str) -> dict[str, str]:
    """`values` with each `${VAR}` taken from loopdeck's environment; one it lacks is named."""
    out = {}
    for name, value in values.items():

        def take(match: re.Match[str], name: str = name) -> str:
            var = match.group(1)
            if var not in os.environ:
                raise MissingVariable(
                    f"{where} {name}: ${{{var}}} is not set in loopdeck's environment"
                )
            return os.environ[var]

        out[name] = re.sub(r"\$\{(\w+)\}", take, value)
    return out


def child_environment(added: Mapping[str, str]) -> dict[str, str]:
    """loopdeck's own environment with `added` set: what a command loopdeck starts in the
    working copy gets (the goal check, its bytecode cache moved out of the folder)."""
    return {**os.environ, **added}
