"""`loopdeck gateway`: an agent that never asks (Claude Code in `-p` mode, Codex with approvals
off, an agent built on a framework) run under loopdeck's guarantees at the model boundary. The
agent's model calls reach loopdeck's gateway (OpenAI Chat Completions, OpenAI Responses or
Anthropic Messages, streamed or not), go upstream through LiteLLM's adapters, and each answer
is decided before the agent sees it: its tool uses keyed by the guard, its writes held for the
operator, its spend counted against the run's caps."""
