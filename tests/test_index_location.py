"""One rule says which index is meant (`store.backends.resolve_index`): the one given, else
$FOOTNOTE_INDEX, else .footnote/index; the command line, the graphs' contexts, the server
and the feedback store all ask it, so they never disagree (issue 40)."""

from __future__ import annotations

from pathlib import Path

import pytest

from footnote.feedback.records import SQLITE_NAME, feedback_location
from footnote.graph.context import Context
from footnote.graph.indexer import IndexerContext
from footnote.server.settings import DEFAULT_INDEX_NAME, ServerSettings
from footnote.store.backends import DEFAULT_INDEX, resolve_index


def test_the_given_index_wins_then_the_environment_then_the_default() -> None:
    env = {"FOOTNOTE_INDEX": "/srv/index"}
    assert resolve_index("mine", env) == "mine"
    assert resolve_index(Path("/a/b"), env) == "/a/b"
    assert resolve_index(None, env) == resolve_index("", env) == "/srv/index"
    assert resolve_index(env={}) == DEFAULT_INDEX
    assert resolve_index(env={"FOOTNOTE_INDEX": "  "}) == DEFAULT_INDEX, "blank is unset"


@pytest.mark.parametrize("value", ["/srv/handbook", "   ", None])
def test_every_surface_resolves_the_same_index(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, value: str | None
) -> None:
    monkeypatch.chdir(tmp_path)
    env = {} if value is None else {"FOOTNOTE_INDEX": value}
    for name in ("FOOTNOTE_INDEX", "FOOTNOTE_FEEDBACK_DB", "FOOTNOTE_CHECKPOINT_URL"):
        monkeypatch.delenv(name, raising=False)
    if value is not None:
        monkeypatch.setenv("FOOTNOTE_INDEX", value)
    meant = resolve_index()
    assert Context().index_dir == IndexerContext().index_dir == meant
    served = ServerSettings.from_env(env).indexes[DEFAULT_INDEX_NAME]
    assert served == str(Path(meant).resolve())
    assert feedback_location(env) == str(Path(meant).resolve().parent / SQLITE_NAME)
