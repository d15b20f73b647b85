"""A kind of run: what drives it (loopdeck's own loop on a model, an ACP agent, …) and what it
works on (a Python env, an MCP server's tools, a working copy). Each kind is one package with
one `KIND` and one line in the registry (`operator/kinds.py`); the runtime, the guarantees and
the front ends are the same for every kind.

A kind is chosen by its `scenario.toml` table (`[mcp]`, `[agent]`; none: a Python `env.py`),
or by a target that names it (`loopdeck acp`: a folder and an agent, no env folder). It
checks its env folder, names its own agent when it brings one, and opens the run's
environment and the loop that drives it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from loopdeck.core.envdir import EnvDir
from loopdeck.core.environment import Environment
from loopdeck.core.model import ModelClient
from loopdeck.core.run_host import RunHost
from loopdeck.core.scenario import Script


class Turns(Protocol):
    """The agent's side of a run: its turns until a stop."""

    async def run(self) -> None: ...


LoopMaker = Callable[[RunHost], Turns]


class Target(Protocol):
    """A run with no env folder (`loopdeck acp`, `loopdeck gateway`): what it works on, said
    by its kind. Read-only, as the CLI's frozen targets are."""

    @property
    def kind(self) -> str: ...
    @property
    def goal(self) -> str: ...
    @property
    def workdir(self) -> Path: ...
    @property
    def env_name(self) -> str: ...


@dataclass(frozen=True)
class Opening:
    """What a kind opens a run from: an env folder (a fresh copy of its workspace as
    `workdir`) or a target, the script it plays if any, and who hears what it waits for."""

    workdir: Path
    env_dir: EnvDir | None = None
    target: Any = None
    script_name: str | None = None
    script: Script | None = None
    phase: Callable[[str], None] | None = None


@dataclass
class OpenedRun:
    env: Environment
    loop: LoopMaker | None = None  # None: loopdeck's own loop, on the run's model
    model: ModelClient | None = None  # the kind's own (an agent's); None: the run's model


class RunKind(Protocol):
    name: str
    table: str | None  # the scenario.toml table that makes an env this kind; None: default

    def check(self, env_dir: EnvDir) -> None:
        """What the env folder lacks for this kind: a `ScenarioError` naming it."""

    def agent_name(self, env_dir: EnvDir | None, target: Any) -> str | None:
        """The run's model as named when the kind brings its own agent; None: a model."""

    def plays_scripts(self, env_dir: EnvDir) -> bool:
        """Whether the run plays one of the env's scripts (loopdeck's scripted agent)."""

    def check_scripts(self, env_dir: EnvDir) -> None:
        """Every script checked before any run (`loopdeck check`), against the tools the env
        has (an MCP server's: the server started once to list them, and what it shows wrong
        in the scenario said with the scripts' problems, all at once)."""

    def open(self, opening: Opening) -> OpenedRun:
        """The run's environment and loop (a server started, an agent's command made)."""


def opens_outside(kind: RunKind) -> bool:
    """Whether opening a run of `kind` starts or reaches something outside this process (an
    MCP server), as a kind says with `opens_outside = True` (by default it does not). Such a
    run placed on workers is checked where it is submitted without being opened: its worker
    opens it, and refuses what only opening it shows."""
    return getattr(kind, "opens_outside", False) is True
