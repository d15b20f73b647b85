"""An env whose tools are an MCP server's (`[mcp]` in `scenario.toml`), driven by loopdeck's
own loop on the run's model; the server started for the run on its working copy."""

from __future__ import annotations

from typing import Any

from loopdeck.core.envdir import EnvDir
from loopdeck.core.run_kind import OpenedRun, Opening
from loopdeck.core.scenario import ScenarioError
from loopdeck.mcp_env.config import TABLE, mcp_config


class McpKind:
    name = "mcp"
    table = TABLE
    opens_outside = True  # its server: started (or reached over HTTP) as a run opens

    def check(self, env_dir: EnvDir) -> None:
        """An MCP env with no `env.py` says its state and its goal check in scenario.toml."""
        scenario, where = env_dir.scenario, env_dir.path / "scenario.toml"
        config = mcp_config(env_dir)
        if env_dir.module is not None:
            return
        if config.snapshot is None:
            raise ScenarioError(
                f"{where}: [mcp] has no snapshot: list the resources or read tools that hold"
                ' the goal\'s state (or write snapshot = "none": the state is then not'
                " observed), or give env.py with snapshot()"
            )
        if scenario.goal_check is None:
            raise ScenarioError(
                f"{where}: no goal_check: give the command that checks the goal in the working"
                " copy (exit 0: met), or env.py with unmet()"
            )

    def agent_name(self, env_dir: EnvDir | None, target: Any) -> str | None:
        return None

    def plays_scripts(self, env_dir: EnvDir) -> bool:
        return True

    def check_scripts(self, env_dir: EnvDir) -> None:
        """`loopdeck check`: the server started once, whenever the scenario names anything it
        must have (an override, a snapshot entry, a script's call), and every problem `run`
        would refuse said together (`opening.check_against_server`)."""
        from loopdeck.mcp_env.opening import check_against_server

        check_against_server(env_dir)

    def open(self, opening: Opening) -> OpenedRun:
        from loopdeck.mcp_env.opening import open_mcp_env

        assert opening.env_dir is not None
        if opening.phase is not None:
            opening.phase("starting the env's MCP server and listing its tools…")
        return OpenedRun(open_mcp_env(opening.env_dir, opening.workdir))


KIND = McpKind()
