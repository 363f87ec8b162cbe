"""The `smartune` command line: a thin shell; subcommands import their side lazily."""
