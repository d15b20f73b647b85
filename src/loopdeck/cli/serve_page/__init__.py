"""The page `loopdeck serve` gives a browser (`app_index.html`, textual-serve's own with its
fonts served here) and the symbol fonts it loads (made by `tools/serve_fonts.py`): package data,
found with importlib.resources."""
