"""`loopdeck envs`, `init-env` and `check`: finding envs, starting your own, testing one."""

from __future__ import annotations

import argparse
import asyncio
import difflib
import json
import re
import shutil
import tomllib
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from loopdeck.core.scenario import ScenarioError
from loopdeck.core.text import visible


def run_env_command(args: argparse.Namespace) -> int:
    if args.command == "envs":
        return _envs(args)
    if args.command == "init-env":
        return _init_env(args)
    from loopdeck.cli.env_check import check

    return asyncio.run(check(args))


def _envs(args: argparse.Namespace) -> int:
    from loopdeck.operator.env_listing import list_envs
    from loopdeck.operator.launch import sample_envs_root

    found = list_envs()
    if args.json:
        print(json.dumps(found))
        return 0
    console = Console()
    # The folder's path is never cut by a line break (it is copied into a command).
    where = Text(f"sample envs in {visible(str(sample_envs_root()))}", style="dim")
    console.print(where, soft_wrap=True)
    if not found:
        console.print("no envs there (LOOPDECK_SAMPLE_ENVS names the folder to read)")
    for env in found:
        console.print(_named(env, console.width))
        if env["scripts"]:
            console.print(_scripts(env))
    console.print("[dim]run one by name (loopdeck run NAME) or by path (loopdeck run ./FOLDER)[/]")
    return 0


def _named(env: dict[str, Any], width: int) -> Table:
    """An env's name and its goal on one line, cut with "…" where it is longer (the whole
    goal is in `envs --json` and its scenario.toml), then, kept before the goal, that its
    scripts are checked only as a run starts where they are; or why the folder is refused,
    wrapped under itself (never under the name), never cut."""
    from loopdeck.operator.env_listing import CHECKED_AT_START, refusal_words

    grid = Table.grid(padding=(0, 2))
    name = Text(visible(env["env"]))  # outside text: never read as markup
    grid.add_column(no_wrap=True, style="bold", min_width=name.cell_len)
    grid.add_column(overflow="fold")
    if "error" in env:
        why = visible(refusal_words(env, env["error"]))
        grid.add_row(name, Text.assemble(("refused: ", "bold red"), (why, "red")))
    else:
        goal = Text(visible(env["goal"]))
        said = [Text(CHECKED_AT_START, style="yellow")] if env.get("checked_at_start") else []
        room = width - name.cell_len - 2 - sum(note.cell_len + 2 for note in said)
        goal.truncate(max(1, room), overflow="ellipsis")
        for _ in said:
            grid.add_column(no_wrap=True)
        grid.add_row(name, goal, *said)
    return grid


def _scripts(env: dict[str, Any]) -> Table:
    """An env's scripts, one a row: `--script NAME` whole, its description wrapped beside it
    (under itself, never under the name); a script `loopdeck run` refuses says so and why."""
    from loopdeck.operator.env_listing import refusal_words

    grid = Table.grid(padding=(0, 1))
    grid.add_column(no_wrap=True)
    grid.add_column(overflow="fold")
    refused = env.get("refused", {})
    for name, description in env["scripts"].items():
        about = Text(visible(description))
        if name in refused:
            why = visible(refusal_words(env, refused[name], name))
            about = Text.assemble(("refused: ", "bold red"), (why, "red"))
        grid.add_row(Text(f"    --script {visible(name)}"), about)
    return grid


def _init_env(args: argparse.Namespace) -> int:
    from loopdeck.operator.launch import sample_envs_root

    root = sample_envs_root()
    source = root / args.name
    if not (source / "scenario.toml").is_file():
        raise ScenarioError(_no_sample(args.name, root))
    dest: Path = args.dest or Path.cwd() / args.name
    if dest.exists():
        raise ScenarioError(f"{dest} already exists; choose another folder")
    name_line = _name_line(dest.resolve().name)
    try:
        shutil.copytree(source, dest, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    except OSError as exc:  # no such parent, a file where a folder goes, no permission
        shutil.rmtree(dest, ignore_errors=True)  # what was copied before it failed
        why = exc.strerror or str(exc)
        raise ScenarioError(f"{dest}: cannot create the env folder there ({why})") from None
    try:
        _rename(dest / "scenario.toml", name_line)
    except BaseException as exc:  # never a half-made env left behind, named after the sample
        shutil.rmtree(dest, ignore_errors=True)
        if isinstance(exc, OSError):
            why = exc.strerror or str(exc)
            raise ScenarioError(
                f"{dest}: cannot name the env in its scenario.toml ({why})"
            ) from None
        raise
    shown = visible(str(dest))
    print(f"created {shown} from the sample env {visible(args.name)}")
    print(f"edit {shown}/scenario.toml and {shown}/env.py, then: loopdeck check {shown}")
    return 0


def _no_sample(name: str, root: Path) -> str:
    """Why `init-env NAME` copies nothing: the samples there are, the one meant first when
    the name is close to one (`servce_outage`)."""
    found = root.iterdir() if root.is_dir() else ()
    names = sorted(p.name for p in found if (p / "scenario.toml").is_file())
    close = difflib.get_close_matches(name, names, n=1, cutoff=0.7)
    meant = f"; did you mean {close[0]}?" if close else ""
    return f"no sample env named {name!r}{meant} (samples in {root}: {', '.join(names)})"


_NAME = re.compile(r"^name\s*=.*$", re.MULTILINE)


def _name_line(name: str) -> str:
    """`name = "..."` naming the env after its new folder, as TOML that reads back the same
    (JSON's escapes of a quote, a backslash or a control character are TOML's too)."""
    line = f"name = {json.dumps(name, ensure_ascii=False)}"
    try:
        line.encode("utf-8")  # a lone surrogate (an undecodable byte of the path) is no text
        if tomllib.loads(line)["name"] == name:
            return line
    except (UnicodeEncodeError, tomllib.TOMLDecodeError):
        pass
    raise ScenarioError(f"{name!r} cannot be an env's name in scenario.toml; choose another folder")


def _rename(scenario: Path, name_line: str) -> None:
    """The copy's top-level `name` (above its first table) says its own folder's name."""
    text = scenario.read_text(encoding="utf-8")
    head_end = m.start() if (m := re.search(r"^\s*\[", text, re.MULTILINE)) else len(text)
    # A function, not a template: the line's backslashes are its own, never read as escapes.
    head, found = _NAME.subn(lambda _: name_line, text[:head_end], count=1)
    if not found:
        head = f"{name_line}\n{head}"
    scenario.write_text(head + text[head_end:], encoding="utf-8")
