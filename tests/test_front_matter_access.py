"""Finding 16: a file whose first lines state `access` in any front-matter-like form is
read with that access or made admins-only with a reason, never indexed public.

Readers disagree on front matter: an empty `---`/`---` block before the real one, a
`%YAML` directive (with a comment or a second directive) before it, MultiMarkdown's bare
`Key: value` lines. The regression cases below each left the document public before.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from footnote.ingest.parsers import parse_file
from footnote.ingest.pipeline import ingest
from footnote.store.types import Caller
from footnote.tools.search import SearchRequest, search

SECRET = "zanzibar"

FORMERLY_PUBLIC = {
    "empty-block-then-keys.md": "---\n---\naccess: [hr]\n---\n# Pay\n\n{secret}\n",
    "empty-block-then-title.md": "---\n---\ntitle: Pay\naccess: hr\n---\n{secret}\n",
    "empty-block-comment.md": "---\n# meta\n---\naccess: [hr]\n---\n{secret}\n",
    "directive-comment.md": "%YAML 1.2\n# strict\n---\naccess: [hr]\n---\n{secret}\n",
    "two-directives.md": "%YAML 1.2\n%TAG ! tag:x,2000:\n---\naccess: [hr]\n---\n{secret}\n",
    "directive-comment.txt": "%YAML 1.2\n# strict\n---\naccess: [hr]\n---\n{secret}\n",
    "second-block.md": "---\ntitle: Pay\n---\n---\naccess: [hr]\n---\n{secret}\n",
    "multimarkdown.md": "Title: Pay\nAccess: hr\n\n{secret}\n",
    "zero-width-fence.md": "\u200b---\naccess: [hr]\n---\n{secret}\n",
    "rule-then-block.md": "---\n```\n---\n\naccess: [hr]\n\n{secret}\n",
}


def _write(path: Path, text: str) -> Path:
    path.write_bytes(text.format(secret=SECRET).encode("utf-8"))
    return path


def test_each_formerly_public_form_is_admins_only_with_a_reason(tmp_path: Path) -> None:
    for name, text in FORMERLY_PUBLIC.items():
        doc = parse_file(_write(tmp_path / name, text), name)
        assert doc.access == [] and doc.access_problem, (name, doc.access)
        assert any(SECRET in s.text for s in doc.sections), "an admin still finds the text"


def test_near_forms_that_are_clear_keep_their_access(tmp_path: Path) -> None:
    clear = {
        "bom.md": "\ufeff---\naccess: [hr]\n---\n{secret}\n",
        "trailing-spaces.md": "---   \naccess: [hr]\n---\n{secret}\n",
        "dots.md": "---\naccess: [hr]\n...\n{secret}\n",
        "toml.md": '+++\naccess = ["hr"]\n+++\n{secret}\n',
    }
    for name, text in clear.items():
        doc = parse_file(_write(tmp_path / name, text), name)
        assert (doc.access, doc.access_problem) == (["hr"], None), name


def test_documents_that_only_mention_access_stay_public(tmp_path: Path) -> None:
    public = {
        "prose.md": "# VPN\n\nYou need access: ask IT.\n\n{secret}\n",
        "example.md": "# Front matter\n\nPut this first.\n```yaml\n---\naccess: [hr]\n---\n"
        "```\n{secret}\n",
        "late.md": "# T\n\n" + "line\n\n" * 40 + "access: [hr]\n{secret}\n",
    }
    for name, text in public.items():
        doc = parse_file(_write(tmp_path / name, text), name)
        assert (doc.access, doc.access_problem) == (None, None), name


def test_ingest_reports_them_and_search_hides_them(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    for name, text in FORMERLY_PUBLIC.items():
        _write(docs / name, text)
    _write(docs / "open.md", "# Open\n\nThe {secret} notes anyone may read.\n")
    index = str(tmp_path / "index")
    summary = ingest([docs], index)
    assert not summary.failed, summary.failed
    assert set(summary.restricted) == set(FORMERLY_PUBLIC)

    def found(groups: tuple[str, ...], *, admin: bool = False) -> set[str]:
        request = SearchRequest(
            query=SECRET,
            index_dir=index,
            k=50,
            stage="bm25",
            caller=Caller(groups=frozenset(groups), admin=admin),
        )
        return {hit.chunk.source for hit in search(request)}

    assert found(("everyone", "hr")) == {"open.md"}
    assert found(("everyone",), admin=True) == {"open.md", *FORMERLY_PUBLIC}


_ACCESS_KEYS = st.sampled_from(
    ["access", "Access", "ACCESS", "acc\u200bess", "\u0430ccess", '"access"', "'access'"]
)
_ACCESS_LINES = st.builds(
    lambda key, sep, dash, value: f"{dash}{key}{sep}{value}",
    _ACCESS_KEYS,
    st.sampled_from([": ", ":", " : ", " = ", "="]),
    st.sampled_from(["", "- ", "  ", "\t"]),
    st.sampled_from(["[hr]", "hr", '["hr"]', "[hr, finance]", "hr, finance"]),
)
_PIECES = st.sampled_from(
    [
        "", "\ufeff", "---", "---   ", "--- x", "...", "+++", "%YAML 1.2", "%TAG ! tag:x,2000:",
        "# comment", "title: Pay", "date: 2024-01-01", "\u200b---", " ---", "---\n---",
        "```", "~~~", "{", "?", "!!map", "<<: {}", "---\u2028", "\u00a0",
    ]
)  # fmt: skip


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    before=st.lists(_PIECES, max_size=6),
    access=_ACCESS_LINES,
    after=st.lists(_PIECES, max_size=4),
    body=st.sampled_from(["# Pay", "Paid monthly.", ""]),
)
def test_an_access_line_in_the_first_lines_never_leaves_a_document_public(
    tmp_path_factory: pytest.TempPathFactory,
    before: list[str],
    access: str,
    after: list[str],
    body: str,
) -> None:
    """Whatever surrounds an `access` line near the top, the document is read as `hr`
    (and perhaps `finance`), or admins-only with a reason: never public (access None)."""
    text = "\n".join([*before, access, *after, body, SECRET]) + "\n"
    for suffix in (".md", ".txt"):
        path = tmp_path_factory.mktemp("fm") / f"doc{suffix}"
        path.write_bytes(text.encode("utf-8"))
        doc = parse_file(path, path.name)
        assert doc.access is not None, (text, doc.access_problem)
        assert set(doc.access) <= {"hr", "finance"}, (text, doc.access)
        assert bool(doc.access) != bool(doc.access_problem), (text, doc.access_problem)


@pytest.mark.parametrize(
    "line", ['"access":[hr]', "'access': [hr]", '"access" : [hr]', "`access`: hr"]
)
def test_a_quoted_access_key_is_never_read_as_another_field(tmp_path: Path, line: str) -> None:
    """`"access":[hr]` is YAML for the key access; PyYAML refuses it, and the plain
    `key: value` reading kept the quotes, so access was a field named '"access"' and the
    document public (found by the property test above). Read as hr's or admins-only."""
    path = tmp_path / "doc.md"
    path.write_text(f"---\n{line}\n---\n# Pay\nzanzibar\n", encoding="utf-8")
    document = parse_file(path, "doc.md")
    assert document.access in (["hr"], []), (line, document.access)
