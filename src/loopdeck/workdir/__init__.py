"""What the kinds of run that work in a folder share, owned by none of them: the guardian every
process a run starts runs under, and the goal check run in the working copy. Light: nothing
here imports a kind, and the guardian imports nothing of loopdeck."""
