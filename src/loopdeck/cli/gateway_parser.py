"""`loopdeck gateway`'s words (its run's flags are `acp`'s and `run`'s, handed in by the parser,
so this module imports nothing of it):

    loopdeck gateway --goal TEXT [--workdir DIR] [--check CMD] --model MODEL [--api-base URL]
                     [--tool NAME=read|write ...] [run's and acp's options] -- AGENT_CMD ARGS…
    loopdeck gateway serve [--port P] [options]
    loopdeck gateway token --goal TEXT [options]

What follows the options is kept whole (`agent_command`): the agent's command after `--`, or
`serve` or `token` and their own options (`cli/gateway_command.py` tells them apart).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

AgentFlags = Callable[[argparse.ArgumentParser, str, str], None]
RunFlags = Callable[[argparse.ArgumentParser], None]
USAGE = (
    "loopdeck gateway --goal TEXT [--workdir DIR] [--check CMD] --model MODEL [--api-base URL]"
    " [--tool NAME=read|write ...] [options] -- AGENT_CMD ARGS…\n"
    "       loopdeck gateway serve [--port P] [options]\n"
    "       loopdeck gateway token --goal TEXT [options]"
)


def tool_risk(text: str) -> tuple[str, str]:
    """`--tool NAME=read|write`."""
    name, sep, risk = text.partition("=")
    name, risk = name.strip(), risk.strip().lower()
    if not sep or not name or risk not in ("read", "write"):
        raise argparse.ArgumentTypeError(
            f"must be NAME=read or NAME=write (e.g. Bash=write), got {text!r}"
        )
    return name, risk


def port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a port number, got {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"must be between 0 and 65535, got {text!r}")
    return value


def _positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number of seconds, got {text!r}") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be greater than 0, got {text!r}")
    return value


class AgentCommand(argparse.Action):
    """What follows the options, kept whole: `-- AGENT_CMD ARGS…`, or `serve` or `token` and
    their options. Any other word there is a stray one: the options after it would be taken
    for the agent's, so it is refused by name."""

    def __call__(
        self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
        option_string: str | None = None,
    ) -> None:  # fmt: skip
        words = list(values or [])
        if words[:1] not in ([], ["--"], ["serve"], ["token"]):
            parser.error(f"unexpected argument {words[0]!r} (the agent's command goes after --)")
        setattr(namespace, self.dest, words)


def add_gateway_command(commands: Any, agent_flags: AgentFlags, run_flags: RunFlags) -> None:
    gateway = commands.add_parser(
        "gateway",
        help="run an agent that never asks behind loopdeck's gateway, on a folder in place",
        usage=USAGE,
    )
    add_gateway_flags(gateway, agent_flags, run_flags)
    gateway.add_argument(
        "agent_command",
        nargs=argparse.REMAINDER,
        action=AgentCommand,
        metavar="-- AGENT_CMD | serve | token",
        help="after --: the agent's command; or `serve` (the gateway for agents started"
        " elsewhere) or `token` (a client token for `serve`: one run)",
    )


def add_gateway_flags(
    parser: argparse.ArgumentParser, agent_flags: AgentFlags, run_flags: RunFlags
) -> None:
    """The flags of `gateway` (and of its `serve` and `token`)."""
    agent_flags(
        parser,
        "what the agent is to do (recorded; the agent's command carries its own prompt)",
        "the goal check, run in DIR when the agent exits, without a shell (exit 0: met; its"
        " output: what is left). Without it you judge, or headless the run stops",
    )
    parser.add_argument("--model", metavar="MODEL", help="the upstream: a LiteLLM model name")
    parser.add_argument("--api-base", metavar="URL", help="the upstream's base URL")
    parser.add_argument(
        "--tool",
        dest="tools",
        action="append",
        default=[],
        type=tool_risk,
        metavar="NAME=read|write",
        help="what a tool of the agent's risks (default: loopdeck's defaults for Claude Code,"
        " Codex and opencode; any other tool is a write); repeatable",
    )
    parser.add_argument(
        "--port", type=port, default=0, metavar="P", help="`serve`: the port (default: a free one)"
    )
    parser.add_argument(
        "--idle",
        type=_positive_seconds,
        metavar="SECONDS",
        help="`token`: the served run ends once its agent is quiet this long after an answer"
        " with no tool use (default: 60)",
    )
    run_flags(parser)
