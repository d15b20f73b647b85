"""An ACP agent in `scenario.toml`, read only by the ACP kind: the `[agent]` table (the
agent's command, the session mode to set, its environment) and the scripts loopdeck's own
scripted ACP agent plays (`[[scripts.NAME.turns]]`, one a prompt turn), so the demo,
`loopdeck check` and the tests run offline against an agent that speaks the protocol like
the real ones, misbehaviours included.

```toml
[agent]
acp = ["npx", "-y", "@google/gemini-cli", "--experimental-acp"]
mode = "default"                 # the session mode to set; refused loudly if the agent lacks it
env = { GEMINI_API_KEY = "${GEMINI_API_KEY}" }   # ${VAR}: from loopdeck's environment

[[scripts.solve.turns]]
steps = [
  { plan = ["Read the failing test", "Fix add"] },
  { tool = "Read calc.py", kind = "read", input = { path = "calc.py" }, read = "calc.py" },
  { tool = "Fix add", kind = "edit", input = { path = "calc.py" }, permission = true,
    write = { path = "calc.py", content = "def add(a, b):\\n    return a + b\\n" } },
  { tool = "Run the tests", kind = "execute", permission = true,
    terminal = { command = "{python}", args = ["-m", "pytest", "-q"] } },
  { usage = { used = 1200, size = 200000, cost = 0.01 } },
  { message = "Fixed add." },
]
```
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, model_validator

from loopdeck.core.envdir import EnvDir
from loopdeck.core.scenario import ScenarioError, described

StopReasonOfTurn = Literal["end_turn", "max_tokens", "max_turn_requests", "refusal", "cancelled"]


class AgentConfig(BaseModel):
    """`[agent]`: the ACP agent a run drives instead of a model."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    acp: list[str] = Field(min_length=1)
    mode: str | None = None
    # Added to the agent's environment; `${VAR}` is taken from loopdeck's own environment
    # when the agent starts, never stored or recorded.
    env: dict[str, str] = Field(default_factory=dict)
    startup_timeout_s: float = Field(default=60.0, gt=0)
    # How long a stop waits for the agent to answer `session/cancel` before it is killed.
    cancel_wait_s: float = Field(default=5.0, gt=0)
    # Fields of the agent's tool input it renews on every call (beyond the ids and times
    # left out by rule): left out of the guard's key and the approval's binding.
    volatile: list[str] = Field(default_factory=list)


class AgentWrite(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    path: str
    content: str


class AgentTerminal(BaseModel):
    """A command run through the client's terminal (`terminal/create`), waited for, its output
    read and reported, the terminal released. `{python}` in the command or its arguments is
    the scripted agent's own interpreter."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    command: str = Field(min_length=1)
    args: list[str] = Field(default_factory=list)
    cwd: str | None = None  # relative to the session's directory, or absolute
    env: dict[str, str] = Field(default_factory=dict)
    output_byte_limit: int | None = Field(default=None, ge=0)


class AgentUsage(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    used: int = Field(ge=0)  # the context window's fill (`usage_update`), not tokens spent
    size: int = Field(default=200_000, gt=0)
    cost: float | None = Field(default=None, ge=0)
    # Tokens this step spent: summed into the turn's own usage (the prompt's answer).
    tokens: int | None = Field(default=None, ge=0)


class AgentStep(BaseModel):
    """One thing the scripted agent does in a turn, in order."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    plan: list[str] | None = None
    message: str | None = None
    thought: str | None = None
    # A tool call: its title, kind and raw input; `permission`: asks the client first;
    # `write`: through the client's fs/write_text_file once allowed; `read`: a path read
    # through fs/read_text_file; `terminal`: a command run in the client's terminal.
    tool: str | None = None
    kind: str = "other"
    input: dict[str, Any] = Field(default_factory=dict)
    permission: bool = False
    write: AgentWrite | None = None
    read: str | None = None
    terminal: AgentTerminal | None = None
    usage: AgentUsage | None = None
    # Misbehaviours real agents have (each is in a tracker):
    write_direct: bool = False  # writes the file itself, never asking the client
    update_before_answer: bool = False  # in_progress sent before the permission's answer
    ignore_rejection: bool = False  # a permission refused, the write done anyway
    unknown_update: bool = False  # an update for a tool call id it never started
    # the tool call started before its input is known (a generic title, rawInput {}), the
    # input sent in an update after (Claude Code)
    late_input: bool = False
    garbage: str | None = None  # a line that is not JSON-RPC, on its stdout
    exit: int | None = None  # exits mid-turn with this status (stderr says why)

    @model_validator(mode="after")
    def _one_thing(self) -> AgentStep:
        things = [
            self.plan is not None,
            self.message is not None,
            self.thought is not None,
            self.tool is not None,
            self.usage is not None,
            self.unknown_update,
            self.garbage is not None,
            self.exit is not None,
        ]
        if sum(things) != 1:
            raise ValueError(
                "a step is one of plan, message, thought, tool, usage, unknown_update,"
                " garbage or exit"
            )
        if self.terminal is not None and (self.tool is None or self.write or self.read):
            raise ValueError("a terminal is run by a tool step that neither writes nor reads")
        return self


class AgentTurn(BaseModel):
    """One `session/prompt` turn of the scripted agent."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    steps: list[AgentStep] = Field(default_factory=list)
    stop: StopReasonOfTurn = "end_turn"
    ignore_cancel: bool = False  # keeps going after `session/cancel`
    repeat: bool = False  # played again for every later prompt (a runaway)


TABLE = "agent"
_TURNS: TypeAdapter[list[AgentTurn]] = TypeAdapter(list[AgentTurn])


def agent_config(env_dir: EnvDir) -> AgentConfig:
    """The env's `[agent]`, checked."""
    return env_dir.table(TABLE, AgentConfig)


def agent_turns(path: Path, name: str, turns: list[dict[str, Any]]) -> list[AgentTurn]:
    """A script's turns as the scripted agent plays them, checked."""
    try:
        return _TURNS.validate_python(turns)
    except ValidationError as exc:
        said = described(exc, f"scripts.{name}.turns", list[AgentTurn])
        raise ScenarioError(f"{path}: invalid scenario:\n{said}") from exc
