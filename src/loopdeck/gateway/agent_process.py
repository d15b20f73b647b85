"""The agent's process: its command in the folder, under loopdeck's guardian (a session of its
own, a child subreaper, a cgroup where one can be made: nothing it starts outlives the run,
not even when loopdeck is killed), stdin closed, its output kept in a file whose tail says what
went wrong. Its environment is loopdeck's, less every variable named like a credential (the
upstream's keys stay with loopdeck), with the gateway as its OpenAI and Anthropic endpoint and
this run's token as its key. Stopped: SIGTERM to the guardian (which ends everything below it
before it exits), then SIGKILL, then what is left in its cgroup."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import sys
import tempfile
import uuid
from pathlib import Path

from loopdeck.workdir.goal_check import stderr_tail
from loopdeck.workdir.guardian_stop import stop_guardian

# What the upstream's credentials are named like: never handed to the agent.
CREDENTIAL = re.compile(
    r"(?i)(?:_API_KEY|_AUTH_TOKEN|_API_TOKEN|_ACCESS_KEY_ID|_SECRET_ACCESS_KEY|_SESSION_TOKEN"
    r"|_APPLICATION_CREDENTIALS|_API_SECRET)$"
)


class AgentFailed(Exception):
    """The agent's command could not start; the message names it."""


def agent_environment(url: str, token: str, added: dict[str, str]) -> dict[str, str]:
    """loopdeck's environment less its credentials, `added` (the user's `--env`), and the
    gateway's door for the agent."""
    env = {name: value for name, value in os.environ.items() if not CREDENTIAL.search(name)}
    env.update(added)
    env.update(
        OPENAI_BASE_URL=f"{url}/v1", OPENAI_API_KEY=token, ANTHROPIC_BASE_URL=url,
        ANTHROPIC_API_KEY=token, ANTHROPIC_AUTH_TOKEN=token,
    )  # fmt: skip
    return env


class AgentProcess:
    def __init__(self, command: list[str], workdir: Path) -> None:
        self.command = command
        self.workdir = workdir
        self.log = Path(tempfile.gettempdir()) / f"loopdeck-gateway-{uuid.uuid4().hex[:12]}.log"
        self.proc: asyncio.subprocess.Process | None = None

    @property
    def name(self) -> str:
        return " ".join(self.command)

    async def start(self, env: dict[str, str]) -> None:
        with self.log.open("ab") as out:
            try:
                self.proc = await asyncio.create_subprocess_exec(
                    sys.executable, "-m", "loopdeck.workdir.guardian", *self.command,
                    stdin=asyncio.subprocess.DEVNULL, stdout=out, stderr=out,
                    cwd=self.workdir, env=env, start_new_session=True,
                )  # fmt: skip
            except OSError as exc:
                raise AgentFailed(self.said("could not start", str(exc))) from exc

    async def exited(self) -> int:
        assert self.proc is not None, "the agent was started"
        return await self.proc.wait()

    def said(self, what: str, why: str = "") -> str:
        tail = ""
        with contextlib.suppress(OSError):
            tail = stderr_tail(self.log.read_text(encoding="utf-8", errors="replace"))
        words = f"the agent `{self.name}` {what}" + (f": {why}" if why else "")
        return words + (f"; its output ends: {tail}" if tail else "")

    async def stop(self) -> None:
        """The agent and everything it started are gone when this returns (bounded)."""
        proc = self.proc
        if proc is not None:
            await stop_guardian(proc)
        self.log.unlink(missing_ok=True)
