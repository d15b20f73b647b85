"""A kind of run written for the tests: what adding a kind takes (its package, one line)."""
