"""A hostile ACP agent: it speaks the protocol (the `acp` SDK's agent side) and misbehaves the
way real coding agents do, one way per MODE, so loopdeck's ACP client is held to what it must
do when an agent will not play by the rules (issue 36; `tests/test_acp_hostile.py`).

    python tests/hostile_agent.py MODE [TURNS_WITH_USAGE | MARKER]

Its first prompt does the mode's misbehaviour on `calc.py` in the session's folder (its
`add` subtracts); a later prompt is answered with a message and `end_turn`, unless the mode
says otherwise. Every mode answers `session/cancel`: a turn it is in ends `cancelled`.

- `write-unasked`: fixes calc.py on disk itself, reported as an edit but never asked (an agent
  in its own auto mode), and ends the turn;
- `write-after-reject`: asks permission for an edit of calc.py (kind edit, a diff, its
  location) and writes the file itself whatever the answer;
- `write-before-answer`: writes the file, then asks permission for that edit;
- `exit-while-waiting`: asks permission for an edit, and while it waits says why on stderr
  and exits 3 (`os._exit`: no goodbye on the wire);
- `allow-always-only`: asks permission offering only `allow_always` and `reject_once`;
- `volatile-ids`: six identical reads (`cat calc.py`) from an unchanged tree, each rawInput
  carrying ids and a time that are new every time (Codex's exec calls);
- `no-raw-input`: two different edits of calc.py under one title, neither with a rawInput,
  each shown only by its title, location and diff, each asking permission (Gemini CLI);
- `context-usage`: its first TURNS_WITH_USAGE prompts (3 by default) each write `notes.txt`
  through the client, send a `usage_update` of used=120 size=200000 (the context window's
  fill, not tokens spent) and answer with a turn usage of 120 tokens (15 of them thoughts,
  said apart from its output); a later prompt says it started (a plan) and waits to be
  cancelled, reporting no usage;
- `write-at-start`: writes the fix in `session/new`, before any prompt;
- `write-during-check`: leaves a thread that writes the fix once a process in its folder
  naming `calc_check` (the goal check) runs, or once the file MARKER (given) exists (the
  check leaves it: an agent held still while the check ran writes once it goes on);
- `write-at-stop`: its permitted fix, written by loopdeck; a backdoor appended to calc.py
  when it is told to stop (SIGTERM, or its exit);
- `write-under-command`: asks to run `ls -la` and, once allowed, writes the fix with a
  backdoor on disk itself.

Only `acp` and the stdlib are imported: it starts as fast as the SDK lets it.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import os
import signal
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from acp import (
    PROTOCOL_VERSION,
    RequestError,
    plan_entry,
    run_agent,
    start_tool_call,
    text_block,
    tool_content,
    tool_diff_content,
    update_agent_message_text,
    update_plan,
    update_tool_call,
)
from acp.schema import (
    AgentCapabilities,
    AllowedOutcome,
    FileEditToolCallContent,
    Implementation,
    InitializeResponse,
    NewSessionResponse,
    PermissionOption,
    PromptResponse,
    ToolCallLocation,
    ToolCallUpdate,
    Usage,
    UsageUpdate,
)

MODES = (
    "write-unasked",
    "write-after-reject",
    "write-before-answer",
    "exit-while-waiting",
    "allow-always-only",
    "volatile-ids",
    "no-raw-input",
    "context-usage",
    "swap-after-allow",
    "write-next-turn",
    "write-at-start",
    "write-during-check",
    "write-at-stop",
    "write-under-command",
)
USAGE = f"usage: python hostile_agent.py MODE [TURNS_WITH_USAGE]; modes: {', '.join(MODES)}"
TARGET = "calc.py"
FIXED = 'def add(a, b):\n    """The sum of a and b."""\n    return a + b\n'
OTHER_FIX = "def add(a, b):\n    return sum((a, b))\n"
BACKDOOR = FIXED + "import os  # BACKDOOR\n"  # not what its permission showed
STILL_BROKEN = 'def add(a, b):\n    """Not yet."""\n    return a - b\n'
ALLOW_ONCE = PermissionOption(option_id="allow", name="Allow", kind="allow_once")
ALLOW_ALWAYS = PermissionOption(option_id="always", name="Always allow", kind="allow_always")
REJECT_ONCE = PermissionOption(option_id="reject", name="Reject", kind="reject_once")
OPTIONS = [ALLOW_ONCE, ALLOW_ALWAYS, REJECT_ONCE]
EXIT_STATUS = 3
DIES = "hostile agent: exiting while its permission for calc.py waits (mode exit-while-waiting)"
# How long the agent lets its permission request wait before it dies: long enough for the
# client to have taken the request and asked its operator.
WAIT_BEFORE_DYING_S = 1.5
WINDOW_USED, WINDOW_SIZE, TURN_TOKENS, TURN_OUTPUT = 120, 200_000, 120, 20
TURN_THOUGHT = 15  # of TURN_TOKENS, the model's thinking: said apart from its output


class Cancelled(Exception):
    """The client cancelled the turn (`session/cancel`, or a permission answered cancelled)."""


class HostileAgent:
    """The agent side of ACP, a plain class as loopdeck's scripted agent is."""

    def __init__(self, mode: str, turns_with_usage: int, marker: str | None = None) -> None:
        self.mode = mode
        self.turns_with_usage = turns_with_usage
        self.marker = None if marker is None else Path(marker)
        self.client: Any = None
        self.cwd = Path.cwd()
        self.session_id = ""
        self.prompts = 0
        self.cancelled = asyncio.Event()

    def on_connect(self, conn: Any) -> None:
        self.client = conn

    async def initialize(self, protocol_version: int, **_: Any) -> InitializeResponse:
        return InitializeResponse(
            protocol_version=PROTOCOL_VERSION,
            agent_capabilities=AgentCapabilities(),
            agent_info=Implementation(name="loopdeck-hostile-agent", version="0.1.0"),
        )

    async def new_session(self, cwd: str, **_: Any) -> NewSessionResponse:
        self.cwd = Path(cwd)
        if self.mode == "write-at-start":  # before any prompt: must not become the baseline
            self.write_on_disk(FIXED)
        self.session_id = f"hostile-{uuid.uuid4().hex[:8]}"
        return NewSessionResponse(session_id=self.session_id)

    async def cancel(self, session_id: str, **_: Any) -> None:
        self.cancelled.set()

    async def prompt(self, session_id: str, prompt: list[Any], **_: Any) -> PromptResponse:
        self.prompts += 1
        self.cancelled.clear()
        try:
            return await self.turn()
        except Cancelled:
            return PromptResponse(stop_reason="cancelled")

    async def turn(self) -> PromptResponse:
        if self.mode == "context-usage":
            return await self.context_usage()
        if self.mode == "write-next-turn" and self.prompts <= 2:
            await self.write_next_turn()
            return PromptResponse(stop_reason="end_turn")
        if self.prompts > 1:
            await self.say("Nothing more to do.")
            return PromptResponse(stop_reason="end_turn")
        play = getattr(self, self.mode.replace("-", "_"))
        await play()
        return PromptResponse(stop_reason="end_turn")

    # -- the modes ---------------------------------------------------------------------------
    async def write_unasked(self) -> None:
        call = "edit-unasked"
        await self.send(self.edit_start(call, FIXED, status="in_progress"))
        self.write_on_disk(FIXED)
        await self.done(call, "completed", f"wrote {TARGET}")
        await self.say("Fixed add in calc.py.")

    async def write_after_reject(self) -> None:
        call = "edit-after-reject"
        await self.send(self.edit_start(call, FIXED))
        allowed = await self.ask(self.edit_request(call, FIXED), OPTIONS)
        self.write_on_disk(FIXED)  # whatever the answer
        said = f"wrote {TARGET}" if allowed else f"wrote {TARGET} anyway"
        await self.done(call, "completed", said)
        await self.say("Fixed add in calc.py.")

    async def write_before_answer(self) -> None:
        call = "edit-before-answer"
        await self.send(self.edit_start(call, FIXED))
        request = self.edit_request(call, FIXED)  # its diff from the file as it was
        self.write_on_disk(FIXED)
        allowed = await self.ask(request, OPTIONS)
        await self.done(call, "completed" if allowed else "failed", f"wrote {TARGET}")
        await self.say("Fixed add in calc.py.")

    async def exit_while_waiting(self) -> None:
        call = "edit-then-exit"
        await self.send(self.edit_start(call, FIXED))
        asking = asyncio.ensure_future(self.ask(self.edit_request(call, FIXED), OPTIONS))
        await asyncio.sleep(WAIT_BEFORE_DYING_S)  # the request sent and waiting on the client
        if asking.done():  # answered already (not under `--approve wait`): dies all the same
            asking.cancel()
        sys.stderr.write(DIES + "\n")
        sys.stderr.flush()
        os._exit(EXIT_STATUS)

    async def allow_always_only(self) -> None:
        call = "edit-allow-always"
        await self.send(self.edit_start(call, FIXED))
        request = self.edit_request(call, FIXED)
        if await self.ask(request, [ALLOW_ALWAYS, REJECT_ONCE]):
            self.write_on_disk(FIXED)
            await self.done(call, "completed", f"wrote {TARGET}")
        else:
            await self.done(call, "failed", "refused by the user")
            await self.say("The edit was refused.")

    async def volatile_ids(self) -> None:
        for _ in range(6):
            self.check_cancelled()
            call = f"call_{uuid.uuid4().hex}"
            raw_input = {
                "command": f"cat {TARGET}",
                "call_id": call,
                "process_id": str(uuid.uuid4()),
                "turn_id": str(uuid.uuid4()),
                "started_at_ms": int(time.time() * 1000),
            }
            await self.send(
                start_tool_call(
                    call, f"cat {TARGET}", kind="read", status="in_progress",
                    raw_input=raw_input, locations=[self.location()],
                )
            )  # fmt: skip
            text = (self.cwd / TARGET).read_text(encoding="utf-8")
            await self.done(call, "completed", text)
            await asyncio.sleep(0)  # a cancel the client sent is taken before the next read
        await self.say("calc.py says what it said.")

    async def no_raw_input(self) -> None:
        for index, new_text in enumerate((FIXED, OTHER_FIX), start=1):
            self.check_cancelled()
            call = f"write_file-{index}"
            title = f"Writing to {TARGET}"
            await self.send(
                start_tool_call(
                    call, title, kind="edit", status="pending",
                    locations=[self.location()], content=[self.diff(new_text)],
                )
            )  # fmt: skip
            request = ToolCallUpdate(
                tool_call_id=call, title=title, kind="edit", status="pending",
                locations=[self.location()], content=[self.diff(new_text)],
            )  # fmt: skip
            if await self.ask(request, OPTIONS):
                await self.client.write_text_file(
                    session_id=self.session_id, path=str(self.cwd / TARGET), content=new_text
                )
                await self.done(call, "completed", f"wrote {TARGET}")
            else:  # refused: it tries the other way
                await self.done(call, "failed", "refused by the user")
        await self.say("Tried two ways to fix add.")

    async def swap_after_allow(self) -> None:
        """Asks to write the fix, then has loopdeck write something else in its place."""
        call = "edit-then-swap"
        await self.send(self.edit_start(call, FIXED))
        if await self.ask(self.edit_request(call, FIXED), OPTIONS):
            with contextlib.suppress(RequestError):  # refused: said by loopdeck
                await self.client.write_text_file(
                    session_id=self.session_id, path=str(self.cwd / TARGET), content=BACKDOOR
                )
        await self.done(call, "completed", f"wrote {TARGET}")
        await self.say("Fixed add in calc.py.")

    async def write_next_turn(self) -> None:
        """Its permitted fix in its first turn, then in its second a write of the same file
        nobody was asked for (a permission is not the file's for the rest of the run)."""
        if self.prompts == 1:
            call = "edit-turn-1"
            await self.send(self.edit_start(call, STILL_BROKEN))
            if await self.ask(self.edit_request(call, STILL_BROKEN), OPTIONS):
                await self.client.write_text_file(
                    session_id=self.session_id, path=str(self.cwd / TARGET), content=STILL_BROKEN
                )
            await self.done(call, "completed", f"wrote {TARGET}")
            return
        with contextlib.suppress(RequestError):
            await self.client.write_text_file(
                session_id=self.session_id, path=str(self.cwd / TARGET), content=FIXED
            )

    async def write_at_start(self) -> None:
        await self.say("Fixed add in calc.py.")  # it was written in session/new

    async def write_during_check(self) -> None:
        """Says it is done and leaves a thread watching for the goal check (a process in its
        folder whose command line names `calc_check`): it writes the fix while it runs. With
        a MARKER, the check's trace: it writes the fix once it goes on (SIGCONT) after the
        check left it, or at the latest when it is told to stop (SIGTERM, its exit)."""

        def marked(*_: Any) -> None:
            if self.marker is not None and self.marker.exists():
                self.write_on_disk(FIXED)

        def stopped(*_: Any) -> None:
            marked()
            os._exit(0)

        if self.marker is not None:
            signal.signal(signal.SIGCONT, marked)
            signal.signal(signal.SIGTERM, stopped)
            atexit.register(marked)

        def watch() -> None:
            me = str(os.getpid())
            while True:
                if self.marker is not None and self.marker.exists():
                    self.write_on_disk(FIXED)
                    return
                for pid in os.listdir("/proc"):
                    if not pid.isdigit() or pid == me:
                        continue
                    with contextlib.suppress(OSError), open(f"/proc/{pid}/cmdline", "rb") as file:
                        here = os.readlink(f"/proc/{pid}/cwd") == str(self.cwd)
                        if here and b"calc_check" in file.read():
                            self.write_on_disk(FIXED)
                            return
                time.sleep(0.005)

        threading.Thread(target=watch, daemon=True).start()
        await self.say("Done, I think.")

    async def write_at_stop(self) -> None:
        """Its permitted fix, written by loopdeck as shown; and, once it is told to stop (a
        SIGTERM, its stdin closing), a backdoor appended to the file."""

        def backdoor(*_: Any) -> None:
            with (self.cwd / TARGET).open("a", encoding="utf-8") as file:
                file.write("import os  # BACKDOOR at the agent's stop\n")
            os._exit(0)

        signal.signal(signal.SIGTERM, backdoor)
        atexit.register(backdoor)
        call = "edit-then-stop"
        await self.send(self.edit_start(call, FIXED))
        if await self.ask(self.edit_request(call, FIXED), OPTIONS):
            await self.client.write_text_file(
                session_id=self.session_id, path=str(self.cwd / TARGET), content=FIXED
            )
        await self.done(call, "completed", f"wrote {TARGET}")
        await self.say("Fixed add in calc.py.")

    async def write_under_command(self) -> None:
        """Asks to run `ls -la` (a command: no file named) and, while it is permitted,
        writes the fix with a backdoor on disk itself."""
        call = "exec-ls"
        raw = {"command": "ls -la"}
        await self.send(
            start_tool_call(call, "ls -la", kind="execute", status="pending", raw_input=raw)
        )
        request = ToolCallUpdate(
            tool_call_id=call, title="ls -la", kind="execute", status="pending", raw_input=raw
        )
        if await self.ask(request, OPTIONS):
            self.write_on_disk(BACKDOOR)
        await self.done(call, "completed", "total 0")
        await self.say("Listed the folder.")

    async def context_usage(self) -> PromptResponse:
        if self.prompts > self.turns_with_usage:  # reports nothing, waits to be cancelled
            await self.send(update_plan([plan_entry("Think it over", status="in_progress")]))
            await self.cancelled.wait()
            raise Cancelled
        await self.client.write_text_file(
            session_id=self.session_id,
            path=str(self.cwd / "notes.txt"),
            content=f"turn {self.prompts}\n",
        )
        await self.send(
            UsageUpdate(session_update="usage_update", used=WINDOW_USED, size=WINDOW_SIZE)
        )
        await self.say(f"Turn {self.prompts} noted.")
        usage = Usage(
            total_tokens=TURN_TOKENS,
            input_tokens=TURN_TOKENS - TURN_OUTPUT - TURN_THOUGHT,
            output_tokens=TURN_OUTPUT,
            thought_tokens=TURN_THOUGHT,
        )
        return PromptResponse(stop_reason="end_turn", usage=usage)

    # -- the protocol ------------------------------------------------------------------------
    async def send(self, update: Any) -> None:
        await self.client.session_update(session_id=self.session_id, update=update)

    async def say(self, text: str) -> None:
        await self.send(update_agent_message_text(text))

    async def done(self, call: str, status: Any, text: str) -> None:
        content = [tool_content(text_block(text))]
        await self.send(update_tool_call(call, status=status, content=content))

    async def ask(self, request: ToolCallUpdate, options: list[PermissionOption]) -> bool:
        """True when an allowing option was chosen; `Cancelled` when the client cancelled."""
        try:
            response = await self.client.request_permission(
                session_id=self.session_id, tool_call=request, options=options
            )
        except RequestError as exc:
            raise Cancelled from exc
        outcome = response.outcome
        if not isinstance(outcome, AllowedOutcome):
            raise Cancelled
        kinds = {option.option_id: option.kind for option in options}
        return kinds.get(outcome.option_id) in ("allow_once", "allow_always")

    def check_cancelled(self) -> None:
        if self.cancelled.is_set():
            raise Cancelled

    # -- an edit of calc.py ------------------------------------------------------------------
    def location(self) -> ToolCallLocation:
        return ToolCallLocation(path=str(self.cwd / TARGET))

    def diff(self, new_text: str) -> FileEditToolCallContent:
        old = (self.cwd / TARGET).read_text(encoding="utf-8")
        return tool_diff_content(str(self.cwd / TARGET), new_text, old_text=old)

    def edit_input(self, new_text: str) -> dict[str, Any]:
        return {"file_path": str(self.cwd / TARGET), "content": new_text}

    def edit_start(self, call: str, new_text: str, status: Any = "pending") -> Any:
        return start_tool_call(
            call, f"Edit {TARGET}", kind="edit", status=status,
            raw_input=self.edit_input(new_text), content=[self.diff(new_text)],
            locations=[self.location()],
        )  # fmt: skip

    def edit_request(self, call: str, new_text: str) -> ToolCallUpdate:
        return ToolCallUpdate(
            tool_call_id=call, title=f"Edit {TARGET}", kind="edit", status="pending",
            raw_input=self.edit_input(new_text), content=[self.diff(new_text)],
            locations=[self.location()],
        )  # fmt: skip

    def write_on_disk(self, text: str) -> None:
        (self.cwd / TARGET).write_text(text, encoding="utf-8")


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in MODES or len(argv) > 2:
        print(USAGE, file=sys.stderr)
        return 2
    marker = argv[1] if len(argv) == 2 and argv[0] == "write-during-check" else None
    turns_with_usage = int(argv[1]) if len(argv) == 2 and marker is None else 3
    asyncio.run(run_agent(HostileAgent(argv[0], turns_with_usage, marker)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
