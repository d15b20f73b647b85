"""MCP servers as environments: an env whose tools, state and goal come from an MCP server
(`scenario.toml`'s `[mcp]` table), under all of loopdeck's supervision."""

from loopdeck.mcp_env.environment import McpEnvironment

__all__ = ["McpEnvironment"]
