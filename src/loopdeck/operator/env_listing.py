"""The env folders a person chooses from (`loopdeck envs`, the console's chooser): each with
its goal and scripts, and what `loopdeck run` would refuse before it starts, said there rather
than after a choice: the folder itself (a broken `scenario.toml`, env code that fails) or one
script (a call the env's tools refuse: an unknown tool, arguments its model refuses). Scripts
are checked where the kind knows its tools without a run (a Python env's); a kind whose
opening starts something outside this process (`opens_outside`: an MCP server) lists its
tools only as its run starts, so its scripts are checked then (or by `loopdeck check`): a
listing starts no server. Reading folders is blocking work: the console's chooser lists them
on a thread."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from loopdeck.core.envdir import EnvDir, find_env_dirs, load_env_dir
from loopdeck.core.run_kind import RunKind, opens_outside
from loopdeck.core.scenario import ScenarioError
from loopdeck.operator.kinds import kind_of
from loopdeck.operator.launch import sample_envs_root

# Beside an env whose scripts' calls are checked against its tools only as a run starts (an
# `[mcp]` server lists them then), in `loopdeck envs` and the chooser alike: none of its
# scripts is marked refused before.
CHECKED_AT_START = "scripts checked as a run starts"


def list_envs() -> list[dict[str, Any]]:
    return [describe_env(path) for path in find_env_dirs(sample_envs_root())]


def describe_env(path: Path) -> dict[str, Any]:
    """An env folder as the chooser lists it: its name, path, goal and scripts, the scripts
    a run refuses (`refused`: each one's reason, as `loopdeck run` says it), and whether its
    scripts are checked only as a run starts (`checked_at_start`: a kind that
    `opens_outside`, whose tools are listed then); or the error that keeps the whole folder
    from running."""
    try:
        env_dir = load_env_dir(path)
        kind = kind_of(env_dir.scenario, path / "scenario.toml")
        kind.check(env_dir)
        at_start = opens_outside(kind)
        refused = {} if at_start else refused_scripts(env_dir, kind)
    except ScenarioError as exc:
        return {"env": path.name, "path": str(path), "error": str(exc), "scripts": {}}
    scripts = {name: s.description for name, s in sorted(env_dir.scenario.scripts.items())}
    return {
        "env": env_dir.name,
        "path": str(path),
        "goal": env_dir.scenario.goal,
        "scripts": scripts,
        "refused": refused,
        "checked_at_start": at_start,
    }


def refused_scripts(env_dir: EnvDir, kind: RunKind) -> dict[str, str]:
    """The scripts the kind's check refuses, each with why. All are checked at once; only
    when that fails, the env with none (its own failure is the folder's: raised) and then
    each script alone, so every refused one is named, not only the first."""
    try:
        kind.check_scripts(env_dir)
        return {}
    except ScenarioError:
        pass
    kind.check_scripts(_with_scripts(env_dir, {}))
    refused: dict[str, str] = {}
    for name, script in sorted(env_dir.scenario.scripts.items()):
        try:
            kind.check_scripts(_with_scripts(env_dir, {name: script}))
        except ScenarioError as exc:
            refused[name] = str(exc)
    return refused


def _with_scripts(env_dir: EnvDir, scripts: dict[str, Any]) -> EnvDir:
    return replace(env_dir, scenario=env_dir.scenario.model_copy(update={"scripts": scripts}))


def refusal_words(env: dict[str, Any], why: str, script: str | None = None) -> str:
    """Why a folder or one of its scripts is refused, in one line, beside its name: the
    folder's own path left out of the files it names (`scenario.toml: …`), and the script's
    name where the line already says it."""
    lines = [line.strip() for line in why.splitlines() if line.strip()]
    said = " ".join([*lines[:1], "; ".join(lines[1:])]).strip()
    said = said.replace(f"{env['path']}/", "")
    if script is not None:
        said = said.replace(f"scenario.toml: script {script!r}, ", "", 1)
    return said
