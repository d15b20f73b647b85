"""The operator console (Textual). Renders events, sends commands; never runs the loop itself."""
