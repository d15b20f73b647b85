"""A server's tools as it lists them again mid-run (`server_changes.py`), against those the run
started with. The run's tools were fixed as it started (its allowlist, what the model was
told), and nothing the server says later makes a tool safer:

- a tool whose hints are less safe than at start (`readOnlyHint` dropped, `destructiveHint`
  set) is a write from then on if it was a read: asked for before it runs (the run's spec
  replaced, `Environment.watch_tools`), even over a scenario's `risk = "read"` (the server
  now says it writes). A read-only hint that appears later never makes a write a read. A
  call made as a read before the run took the change is refused, never run unasked;
- a tool the server no longer lists fails its calls, naming it, until it lists it again;
- a tool that appeared is not offered to the model.

Each is said once, as a warning and a finding of the run (`ServerLog.say`); a read made a
write, its finding carrying that as data (`RiskRaised`: the tool, and why). A run rebuilt from
its log (another worker's, a fork's) lists its server's tools anew, as they are now: the tools
it had made writes are made writes again where its log's findings said so (`made_again`,
through `Environment.risk_raised_again`), never taken as the reads the server may say they are
again, and never found by their names in the finding's words."""

from __future__ import annotations

import threading
from collections.abc import Callable

from loopdeck.core.finding_events import RiskRaised
from loopdeck.core.tools import ErrorCode, Risk, ToolError, ToolSpec
from loopdeck.mcp_env.listing import ServerTool

Specs = dict[str, ToolSpec]
Say = Callable[[str, RiskRaised | None], None]  # a finding, and the write it made of a read
Said = list[tuple[str, RiskRaised | None]]


def less_safe(start: ServerTool, now: ServerTool) -> str | None:
    """How `now`'s hints are less safe than `start`'s, in words; None when they are not."""
    said = []
    if start.read_only is True and now.read_only is not True:
        said.append(f"readOnlyHint was true, now {_hint(now.read_only)}")
    if start.destructive is not True and now.destructive is True:
        said.append(f"destructiveHint was {_hint(start.destructive)}, now true")
    return "; ".join(said) or None


def _hint(value: bool | None) -> str:
    return "absent" if value is None else str(value).lower()


class ToolChanges:
    def __init__(
        self,
        server: str,
        offered: list[ServerTool],
        risks: dict[str, Risk],
        listed: list[ServerTool],
        say: Say,
        as_write: Callable[[ServerTool, str], ToolSpec],
    ) -> None:
        self._server = f"MCP server `{server}`"
        self._start = {tool.name: tool for tool in offered}
        self._risks = dict(risks)  # each offered tool's risk now: only ever made a write
        self._started = dict(risks)
        self._listed = {tool.name for tool in listed}  # those said already, offered or not
        self._say = say
        self._as_write = as_write  # the tool's spec as a write, with where that came from
        self._lock = threading.Lock()
        self._gone: set[str] = set()
        self._why: dict[str, str] = {}  # a tool's change as last said
        self._specs: Specs = {}  # the specs replaced, for the run (`watch`)
        self._changed: Callable[[Specs], None] | None = None

    def watch(self, changed: Callable[[Specs], None]) -> None:
        """`changed(specs)` for every spec replaced from now on; those replaced already, at
        once."""
        with self._lock:
            self._changed, specs = changed, dict(self._specs)
        if specs:
            changed(specs)

    def listed(self, tools: list[ServerTool]) -> None:
        """The server's tools as it lists them now, on the connection's loop."""
        now = {tool.name: tool for tool in tools}
        replaced: Specs = {}
        said: Said = []
        with self._lock:
            for name, start in self._start.items():
                said += self._compared(name, start, now.get(name), replaced)
            for name in sorted(now.keys() - self._listed):
                self._listed.add(name)
                words = (
                    f"{self._server} now lists a tool {name}, which this run does not offer to"
                    " the model: its tools were fixed as it started"
                )
                said.append((words, None))
            self._specs.update(replaced)
            told = self._changed
        for words, raised in said:
            self._say(words, raised)
        if replaced and told is not None:
            told(replaced)

    def _compared(
        self, name: str, start: ServerTool, now: ServerTool | None, replaced: Specs
    ) -> Said:
        if now is None:
            if name in self._gone:
                return []
            self._gone.add(name)
            return [
                (f"{self._server} no longer lists its tool {name}: its calls fail, naming it", None)
            ]
        self._gone.discard(name)
        why = less_safe(start, now)
        if why is None or self._why.get(name) == why:
            return []
        self._why[name] = why
        if self._risks[name] == "write":
            words = (
                f"{self._server} changed its tool {name} during the run ({why}): a write"
                " already, asked for as before"
            )
            return [(words, None)]
        self._risks[name] = "write"
        replaced[name] = self._as_write(start, f"server changed its hints during the run ({why})")
        words = (
            f"{self._server} changed its tool {name} during the run ({why}): it was a read, and"
            " is a write from now on, asked for before it runs"
        )
        return [(words, RiskRaised(tool=name, why=why))]

    def made_again(self, raised: RiskRaised) -> Specs:
        """A rebuilt run at the place its log's finding said `raised.tool` was made a write:
        made one again, its spec returned for the run to take at once (the run says the
        finding again where it must: `core/recorded_inputs.py`)."""
        name, why = raised.tool, raised.why
        with self._lock:
            if self._risks.get(name) != "read":
                return {}
            self._why[name] = why
            self._risks[name] = "write"
            spec = self._as_write(
                self._start[name], f"server changed its hints during the run ({why})"
            )
            self._specs[name] = spec
        return {name: spec}

    def vet(self, name: str, risk: Risk | None) -> None:
        """`name` about to be called as `risk` (None: as the run started with it), on the
        connection's loop once the tools are listed as the server last said: a `ToolError`
        (nothing run) for a tool it no longer lists, or one called as a read it made a write."""
        with self._lock:
            gone, now = name in self._gone, self._risks.get(name)
        if gone:
            raise ToolError(
                ErrorCode.UNKNOWN_TOOL,
                f"{name} not called: {self._server} no longer lists it (its tools changed"
                " during the run)",
                applied=False,
            )
        if (risk or self._started.get(name)) == "read" and now == "write":
            raise ToolError(
                ErrorCode.PERMISSION_DENIED,
                f"{name} not called: {self._server} changed it during the run"
                f" ({self._why[name]}); it is a write from now on, asked for before it runs",
                applied=False,
            )
