"""The default kind: an env folder whose `env.py` makes the environment (its tools, its
`snapshot()`, its goal check), driven by loopdeck's own loop on the run's model."""

from __future__ import annotations

import shutil
from typing import Any

from loopdeck.core.envdir import EnvDir
from loopdeck.core.run_kind import OpenedRun, Opening
from loopdeck.core.scenario import ScenarioError
from loopdeck.core.script_check import check_scripts


class PythonKind:
    name = "python"
    table = None

    def check(self, env_dir: EnvDir) -> None:
        if env_dir.module is None:
            raise ScenarioError(f"{env_dir.path / 'env.py'}: file not found")

    def agent_name(self, env_dir: EnvDir | None, target: Any) -> str | None:
        return None

    def plays_scripts(self, env_dir: EnvDir) -> bool:
        return True

    def check_scripts(self, env_dir: EnvDir) -> None:
        """Against the tools of an env made on a scratch workspace."""
        workdir = env_dir.prepare_workdir()
        try:
            tools = {spec.name: spec for spec in env_dir.create(workdir).tools()}
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
        check_scripts(env_dir.path / "scenario.toml", env_dir.scenario.scripts, tools)

    def open(self, opening: Opening) -> OpenedRun:
        assert opening.env_dir is not None
        return OpenedRun(opening.env_dir.create(opening.workdir))


KIND = PythonKind()
