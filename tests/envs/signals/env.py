"""An env whose runs go on until stopped: a poll loop, or a child process that runs long."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from loopdeck.core.environment import Environment, tool


class Signals(Environment):
    def __init__(self, workdir: Path, data: dict[str, Any]) -> None:
        self.polls = 0

    def snapshot(self) -> dict[str, Any]:
        return {"done": False}

    def unmet(self, snapshot: dict[str, Any]) -> list[str]:
        return ["never met"]

    @tool(exempt=True)
    def poll(self, args: BaseModel) -> dict[str, Any]:
        """Poll a job that never finishes."""
        self.polls += 1
        return {"status": "running"}

    @tool(timeout_s=600)
    def long_job(self, args: BaseModel) -> dict[str, Any]:
        """Run a job in a child process, for minutes."""
        done = subprocess.run([sys.executable, "-c", "import time; time.sleep(300)"], check=False)
        return {"code": done.returncode}


def make_env(workdir: Path, data: dict[str, Any]) -> Environment:
    return Signals(workdir, data)
