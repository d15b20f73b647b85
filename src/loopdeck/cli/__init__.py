"""`loopdeck`: the command line. `main` routes a command to the module that runs it (each
imported only then) and turns what stopped it into one line and an exit code.

Light on purpose: it imports no pydantic model, no operator layer and no console, so
`loopdeck run` paints its first frame before the heavy imports (they happen behind it).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Callable, Sequence

from loopdeck import stop_signals
from loopdeck.cli.chosen_command import command_word
from loopdeck.cli.parser import ENV_COMMANDS, EXIT_BAD_INPUT, STORE_COMMANDS, build_parser

# Commands that run an agent here: a stop signal before their loop can take it is kept
# (`stop_signals.kept`), so the run is still recorded killed.
RUN_COMMANDS = ("run", "acp", "gateway")
# Commands that hold a terminal for long: they outlive it (`stop_signals.outlive_terminal`),
# so a summary or a console's drawing into a closed one never stalls a run's stop.
TERMINAL_COMMANDS = (*RUN_COMMANDS, "console", "attach", "replay")


def main(argv: Sequence[str] | None = None) -> int:
    words = sys.argv[1:] if argv is None else argv
    args = build_parser(command_word(words)).parse_args(words)
    if args.command in TERMINAL_COMMANDS:
        stop_signals.outlive_terminal()
    try:
        with stop_signals.kept(args.command in RUN_COMMANDS):
            return _command(args, words)(args)
    except BrokenPipeError:
        # A reader like `head` went away: nothing more to say, and nothing was lost.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:  # Ctrl-C where no run was there to stop (an import, a read)
        print("loopdeck: interrupted", file=sys.stderr)
        return 128 + signal.SIGINT
    except Exception as exc:
        if not isinstance(exc, _bad_input()):
            raise
        print(f"loopdeck: {_said(exc)}", file=sys.stderr)
        return EXIT_BAD_INPUT


def _command(args: argparse.Namespace, words: Sequence[str]) -> Callable[[argparse.Namespace], int]:
    """The function that runs `args.command` (parsed from `words`), from the module that
    holds it."""
    if args.command in ENV_COMMANDS:
        from loopdeck.cli.env_commands import run_env_command

        return run_env_command
    if args.command in STORE_COMMANDS:
        from loopdeck.cli.store_commands import run_store_command

        return run_store_command
    if args.command == "policy":
        from loopdeck.cli.policy_commands import run_policy_command

        return run_policy_command
    if args.command == "gateway":
        from loopdeck.cli.gateway_command import own_command

        if (own := own_command(args, words)) is not None:
            return own
    if args.command == "serve":
        from loopdeck.cli.serve import run_serve

        return run_serve
    if args.command in ("submit", "worker", "fork"):
        from loopdeck.cli.worker_commands import run_worker_command

        return run_worker_command
    from loopdeck.cli import runs

    if args.command == "console":
        return runs.launcher
    return runs.run_headless if args.headless or args.json else runs.run_console


def _said(problem: object) -> str:
    """A message naming outside text (a path, an env's or a script's name): its controls and
    bidi characters shown as escapes, never obeyed by the terminal."""
    from loopdeck.core.text import visible

    return visible(str(problem))


def _bad_input() -> tuple[type[Exception], ...]:
    """What the CLI reports in one line with exit 2 (imported only when something failed)."""
    from loopdeck.core.scenario import ScenarioError
    from loopdeck.llm.client import MissingCredentials
    from loopdeck.store.base import StoreError

    return (ScenarioError, ValueError, StoreError, MissingCredentials)


def entry() -> None:
    """The `loopdeck` command. Everything is recorded and closed when `main` returns; the
    interpreter's own teardown of LiteLLM's modules takes over a second, so it is skipped."""
    code = main()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except OSError as exc:  # the terminal or the pipe's reader is gone: nothing to say to
        if exc.errno not in stop_signals.GONE:
            raise
    if stop_signals.ended_by is not None:
        # Stopped by a signal, its runs recorded killed: the env's subprocesses go too, and
        # the process ends by that signal, as its sender expects.
        stop_signals.end_children()
        stop_signals.exit_by_signal(stop_signals.ended_by)
    os._exit(code)
