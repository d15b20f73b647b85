"""Model access. Every call goes through LiteLLM, imported lazily so the console paints first."""
