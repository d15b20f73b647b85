"""ACP agents as runs: a coding agent that speaks the Agent Client Protocol, driven under
loopdeck's approvals, guard, budgets, goal check and kill switch; and loopdeck's own scripted
ACP agent."""
