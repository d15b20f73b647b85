"""loopdeck: an operator console for supervised LLM agents."""

__version__ = "0.1.0"
