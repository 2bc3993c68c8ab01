"""Connectors: sources where teams keep their knowledge (a git repository today), read in
full once and then by what changed since the checkpoint the index recorded.

`base` holds the protocol and its shapes, `registry` maps a source's scheme to its
connector, `candidates` turns a connector's documents into ingest candidates, and each
connector has a module of its own (`git`, over `git_cli`; `python_symbols` cuts Python
files at their definitions). See docs/connectors.md.
"""
