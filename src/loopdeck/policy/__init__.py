"""Policy as code over a run's state: rules written in CEL, in a TOML file at three levels
(the user's, the env folder's, the run's `--policy`), deciding a call before any person at
the one place approvals are asked (`core/policy_gate.py`), with their inline tests, and the
tools that explain and replay what a policy decided."""
