"""The sample envs, shipped inside the package as `loopdeck.sample_envs` (data, not code)."""
