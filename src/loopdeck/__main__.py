from loopdeck.cli import entry

entry()
