"""A Python env as a kind of run: an env folder's `env.py` and loopdeck's own loop."""
