"""`loopdeck gateway --goal TEXT [--workdir DIR] [--check CMD] --model MODEL [--api-base URL]
[--tool NAME=read|write …] -- AGENT_CMD ARGS…`: an agent that never asks, run on the user's
folder in place behind loopdeck's gateway, headless or in the console as any run (`cli/runs.py`
drives it; this module checks its words and makes its options).

Light at import, like the rest of the CLI: the run's modules are imported only when its
options are made.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from loopdeck.caps import FLAGGED_CAPS
from loopdeck.cli.agent_words import folder_and_command_problem, said_refused
from loopdeck.cli.chosen_command import command_word
from loopdeck.cli.gateway_parser import add_gateway_flags
from loopdeck.cli.gateway_target import GatewayTarget
from loopdeck.cli.parser import EXIT_BAD_INPUT, add_agent_flags, add_run_flags, budget_overrides
from loopdeck.llm.client import SCRIPTED

if TYPE_CHECKING:
    from loopdeck.operator.launch import RunOptions

USAGE = (
    "loopdeck gateway --goal TEXT [--workdir DIR] [--check CMD] --model MODEL [--api-base URL]"
    " [--tool NAME=read|write ...] -- AGENT_CMD ARGS…"
)
# What `serve` and `token` each carry out, by the flag's dest; any other flag given to them is
# refused by name, never dropped. A token carries its run's settings; `serve` only serves (a
# served run starts no agent process, so `--env` is nobody's; neither has a console or a trace).
TAKEN = {
    "serve": {"port", "db", "notify", "notify_after", "notify_content", "headless"},
    "token": {
        "goal", "workdir", "check", "model", "api_base", "tools", "idle", "approve", "run_id",
        "pause_at", "policy", "headless", *(cap.option for cap in FLAGGED_CAPS),
    },
}  # fmt: skip


def own_command(
    args: argparse.Namespace, argv: Sequence[str]
) -> Callable[[argparse.Namespace], int] | None:
    """What runs this `gateway` command when it is not an agent's run (`serve`, `token`, or
    words that cannot run); None: the agent's run, which `cli/runs.py` drives as any run.
    `argv`: the command line `args` was parsed from (which flags it gives)."""
    words = list(args.agent_command)
    if words[:1] in (["serve"], ["token"]):
        sub = argparse.ArgumentParser(prog=f"loopdeck gateway {words[0]}")
        add_gateway_flags(sub, add_agent_flags, add_run_flags)
        sub.parse_args(words[1:], namespace=args)
        args.agent_command = []
        if said_refused(stray_flags(sub, given_flags(argv, words), words[0])):
            return lambda _: EXIT_BAD_INPUT
        from loopdeck.cli.gateway_serve import run_serve, run_token

        return run_serve if words[0] == "serve" else run_token
    args.agent_command = words[1:] if words[:1] == ["--"] else words
    return (lambda _: EXIT_BAD_INPUT) if refused(args) else None


def given_flags(argv: Sequence[str], words: list[str]) -> set[str]:
    """The dests of the flags `argv` gives before `serve`/`token` and after it (`words`: that
    word and what follows), by the words it has, never by their values: a flag given its
    default value is given all the same. Parsed as the command was, every default left out."""
    quiet = argparse.ArgumentParser(add_help=False)
    add_gateway_flags(quiet, add_agent_flags, add_run_flags)
    for action in quiet._actions:
        action.default = argparse.SUPPRESS
    line = list(argv)
    start = line.index(command_word(line) or "gateway") + 1
    found: set[str] = set()
    for part in (line[start : len(line) - len(words)], words[1:]):
        said, _ = quiet.parse_known_args(part)
        found |= set(vars(said))
    return found


def stray_flags(parser: argparse.ArgumentParser, given: set[str], word: str) -> str | None:
    """The flags given (`given`: their dests, before or after `serve`/`token`) that `word`
    does not carry out, each named with where it belongs; None when there are none."""
    other = "token" if word == "serve" else "serve"
    given_there = [
        action for action in parser._actions
        if action.option_strings and action.dest in given and action.dest not in TAKEN[word]
    ]  # fmt: skip
    belongs = [a.option_strings[-1] for a in given_there if a.dest in TAKEN[other]]
    nobodys = [a.option_strings[-1] for a in given_there if a.dest not in TAKEN[other]]
    said = []
    if belongs:
        why = " (a token carries its run's settings)" if other == "token" else ""
        said.append(f"{_named(belongs)} to `loopdeck gateway {other}`{why}")
    if nobodys:
        said.append(f"{_named(nobodys)} to neither (only to `loopdeck gateway -- AGENT_CMD`)")
    return f"gateway {word} does not take {'; '.join(said)}" if said else None


def _named(flags: list[str]) -> str:
    return f"{', '.join(flags)}: {'it belongs' if len(flags) == 1 else 'they belong'}"


def problem(args: argparse.Namespace) -> str | None:
    """What keeps this `gateway` command from running, in one line; None when nothing does."""
    if not (args.goal or "").strip():
        return f"gateway needs --goal TEXT, what the agent is to do: {USAGE}"
    if not (args.model or "").strip():
        return f"gateway needs --model MODEL, the upstream (a LiteLLM model name): {USAGE}"
    if args.model.strip() == SCRIPTED:  # said before anything asks how its writes are decided
        return (
            "gateway --model scripted: the gateway forwards to an upstream model (a LiteLLM"
            " model name such as anthropic/claude-sonnet-4-5); `scripted` is loopdeck's own loop's"
        )
    if not args.agent_command:
        return f"gateway needs the agent's command after --: {USAGE}"
    return folder_and_command_problem(args)


def refused(args: argparse.Namespace) -> bool:
    """Says why and returns True when this `gateway` command cannot run."""
    return said_refused(problem(args))


def about(args: argparse.Namespace) -> str:
    """The run in words, for the console's first frame."""
    return f"gateway {' '.join(args.agent_command)} in {args.workdir.resolve()}"


def gateway_options(args: argparse.Namespace) -> RunOptions:
    """`loopdeck gateway`'s words as the run's options."""
    from loopdeck.operator.launch import RunOptions

    workdir = args.workdir.resolve()
    target = GatewayTarget(
        goal=args.goal, workdir=workdir, command=list(args.agent_command), check=args.check,
        env=dict(args.agent_env), model=args.model, api_base=args.api_base,
        tools=dict(args.tools),
    )  # fmt: skip
    return RunOptions(
        env=target.env_name,
        approve=args.approve,
        budget_overrides=budget_overrides(args),
        run_id=args.run_id,
        pause_at=args.pause_at,
        acp=target,
    )
