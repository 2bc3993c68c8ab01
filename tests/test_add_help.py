"""`footnote add --help` teaches every connector: each kind the registry knows has an example
that the registry reads as that kind, and every scheme is named in the help."""

from __future__ import annotations

import shlex

from footnote.ingest.connectors.registry import KINDS, kind_of
from tests.conftest import RunCli


def test_add_help_has_an_example_of_every_connector(run_cli: RunCli) -> None:
    done = run_cli("add", "--help")
    assert done.returncode == 0, done.stderr
    examples = done.stdout.partition("\nexamples:\n")[2].splitlines()
    values = [
        word
        for line in examples
        if " footnote add " in f" {line}"
        for word in shlex.split(line)
        if "://" in word and not word.startswith("https://")
    ]
    assert {kind_of(value).name for value in values} == {k.name for k in KINDS.values()}
    for value in values:
        if not value.startswith("git+file://"):  # a local repository must exist to be read
            kind_of(value).identify(value)
    help_text = " ".join(done.stdout.split())
    assert all(f"{scheme}://" in help_text for scheme in KINDS), sorted(KINDS)
