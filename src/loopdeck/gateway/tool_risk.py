"""Whether a tool use reads or writes, and who said so: the operator (`--tool NAME=read|write`),
the env's scenario (`[gateway.tools.NAME] risk = …`), loopdeck's defaults for the tools of the
agents people run (Claude Code, Codex, opencode) and the Responses API's `tool_search` (a
read), or nobody: a tool nobody named is a write.

A read is released at once (keyed by the guard); a write is held for the operator. Tools that
only touch the agent's own state (a plan, a todo list) are reads; a subagent (`Task`) is a
read too, as its own model calls come through the gateway and are decided one by one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

Risk = Literal["read", "write"]

_READ: Risk = "read"
_WRITE: Risk = "write"
# The tools of the agents people run under the gateway, by the name their model calls them.
BUILT_IN: dict[str, tuple[Risk, str]] = {
    **{name: (_READ, "Claude Code") for name in (
        "Read", "Grep", "Glob", "LS", "NotebookRead", "WebFetch", "WebSearch", "TodoWrite",
        "TodoRead", "Task", "ExitPlanMode", "BashOutput", "ListMcpResourcesTool",
        "ReadMcpResourceTool",
    )},
    **{name: (_WRITE, "Claude Code") for name in (
        "Write", "Edit", "MultiEdit", "NotebookEdit", "Bash", "KillShell", "KillBash",
    )},
    **{name: (_READ, "Codex") for name in (
        "update_plan", "view_image", "read_file", "list_dir", "grep_files", "web_search",
    )},
    **{name: (_WRITE, "Codex") for name in (
        "shell", "local_shell", "apply_patch", "exec_command", "write_stdin",
    )},
    **{name: (_READ, "opencode") for name in (
        "read", "grep", "glob", "list", "todowrite", "todoread", "webfetch", "task",
    )},
    **{name: (_WRITE, "opencode") for name in ("bash", "edit", "write", "patch", "multiedit")},
    # A client-run `tool_search_call`: the agent searches its own deferred tools' definitions.
    "tool_search": (_READ, "the Responses API"),
}  # fmt: skip
FLAG = "--tool {name}={risk}"
SCENARIO = '[gateway.tools.{name}] risk = "{risk}" in scenario.toml'
UNKNOWN = "a tool loopdeck does not know: a write until `--tool NAME=read` says otherwise"


@dataclass(frozen=True)
class ToolRisks:
    """The risks said for this run (`said`: by whom, in words) over the built-in defaults."""

    overrides: Mapping[str, Risk] = field(default_factory=dict)
    said: str = FLAG  # how an override is shown, `{name}` and `{risk}` put in

    def risk_of(self, name: str) -> tuple[Risk, str]:
        """The tool's risk and where it came from, as the proposal shows it."""
        if name in self.overrides:
            risk = self.overrides[name]
            return risk, self.said.format(name=name, risk=risk)
        if name in BUILT_IN:
            risk, agent = BUILT_IN[name]
            return risk, f"loopdeck's default for {agent}'s {name}: it {risk}s"
        return "write", UNKNOWN
