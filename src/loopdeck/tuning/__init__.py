"""Interpreter tuning for the console, fenced off in one place."""
