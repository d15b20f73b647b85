"""`loopdeck envs`, `init-env` and `check`: finding envs, starting your own, testing one."""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
from pathlib import Path

from rich.console import Console
from rich.text import Text

from loopdeck import tuning
from loopdeck.core.scenario import ScenarioError
from loopdeck.core.text import plural, visible


def run_env_command(args: argparse.Namespace) -> int:
    if args.command == "envs":
        return _envs(args)
    if args.command == "init-env":
        return _init_env(args)
    return asyncio.run(_check(args))


def _envs(args: argparse.Namespace) -> int:
    from loopdeck.operator.launch import list_envs, sample_envs_root

    found = list_envs()
    if args.json:
        print(json.dumps(found))
        return 0
    console = Console()
    console.print(Text(f"sample envs in {visible(str(sample_envs_root()))}", style="dim"))
    if not found:
        console.print("no envs there (LOOPDECK_SAMPLE_ENVS names the folder to read)")
    for env in found:
        about = env.get("goal", env.get("error", ""))
        console.print(Text.assemble((visible(env["env"]), "bold"), "  ", visible(about)))
        for name, description in env["scripts"].items():
            console.print(Text(f"    --script {visible(name):<16} {visible(description)}"))
    console.print("[dim]run one by name (loopdeck run NAME) or by path (loopdeck run ./FOLDER)[/]")
    return 0


def _init_env(args: argparse.Namespace) -> int:
    from loopdeck.operator.launch import sample_envs_root

    source = sample_envs_root() / args.name
    if not (source / "scenario.toml").is_file():
        raise ScenarioError(f"no sample env named {args.name!r} (see `loopdeck envs`)")
    dest: Path = args.dest or Path.cwd() / args.name
    if dest.exists():
        raise ScenarioError(f"{dest} already exists; choose another folder")
    shutil.copytree(source, dest, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    shown = visible(str(dest))
    print(f"created {shown} from the sample env {visible(args.name)}")
    print(f"edit {shown}/scenario.toml and {shown}/env.py, then: loopdeck check {shown}")
    return 0


async def _check(args: argparse.Namespace) -> int:
    """Each script of the env, headless and unrecorded, against what it declares it ends with."""
    from loopdeck.operator.launch import RunOptions, prepare_run, resolve_env_dir

    tuning.for_headless()  # a headless run's tuning, as `loopdeck run --headless`
    env_dir = resolve_env_dir(args.env, args.settings)
    failed = 0
    print(f"checking {visible(env_dir.name)} ({visible(str(env_dir.path))})")
    for name, script in sorted(env_dir.scenario.scripts.items()):
        expect = script.expect
        if expect is None:
            print(f"NOTE  {visible(name)}: declares no expect = {{ stop_reason = ... }}; not run")
            continue
        options = RunOptions(
            env=str(env_dir.path),
            script=name,
            model="scripted",
            approve=expect.approve,
            settings=list(args.settings),
        )
        prepared = prepare_run(options)
        try:
            outcome = await prepared.runtime.run()
        finally:
            prepared.cleanup()
        got = outcome.stop_reason
        verdict = "PASS" if got is expect.stop_reason else "FAIL"
        failed += verdict == "FAIL"
        said = (
            f"{got.value}" if verdict == "PASS" else f"{got.value}, expected {expect.stop_reason}"
        )
        calls = plural(outcome.tool_calls, "tool call")
        print(f"{verdict}  {visible(name)}: {said} ({calls}) — {visible(outcome.detail)}")
    print(f"{failed} failed" if failed else "all expectations met")
    return 1 if failed else 0
