"""The command line: an explicit registry of commands."""
