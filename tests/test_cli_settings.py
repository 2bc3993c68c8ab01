"""`footnote settings` and docs/settings.md: the answer graph's settings described once, by
their `Context` fields, and a command line that stops quietly when its reader leaves."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import fields
from pathlib import Path

import pytest

from footnote.cli import settings
from footnote.cli.main import main
from footnote.graph.context import Context

ROOT = Path(__file__).resolve().parents[1]


def test_the_settings_page_is_what_the_command_writes() -> None:
    """docs/settings.md is regenerated, never edited: `footnote settings --markdown`."""
    assert (ROOT / "docs" / "settings.md").read_text(encoding="utf-8") == settings.markdown()


def test_every_field_is_listed_with_its_own_description(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["settings", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [row["name"] for row in rows] == [f.name for f in fields(Context)]
    by_name = {row["name"]: row for row in rows}
    for f in fields(Context):
        assert by_name[f.name]["description"] == f.metadata["description"]
    assert by_name["retrieve_k"]["default"] == "8"
    assert by_name["retrieve_k"]["allowed"] == ">= 1"
    assert by_name["retrieve_k"]["ask_flags"] == ["--retrieve-k", "-k"]
    assert by_name["grade_threshold"]["allowed"] == "0.0 to 1.0"
    assert by_name["user_groups"]["default"] == '["everyone"]'
    assert by_name["index_dir"]["default"] == "$FOOTNOTE_INDEX, else .footnote/index"


def test_the_ask_flags_listed_are_the_ones_ask_takes(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["ask", "--help"])
    help_text = capsys.readouterr().out
    for f in fields(Context):
        for flag in settings.ask_flags(f.name):
            assert flag in help_text, flag


def test_a_reader_that_leaves_ends_the_command_quietly() -> None:
    """`footnote settings | head -1`: the closed pipe is not reported as a failure (before,
    it printed 'a provider failed: could not reach the provider's server: Broken pipe')."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "footnote.cli.main", "settings"],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
            check=False,
        )
    finally:
        os.close(write_end)
    assert done.stderr == ""
    assert done.returncode == 141
