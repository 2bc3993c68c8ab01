"""The `footnote` command line: one module per group of subcommands, `main` wiring them."""
