"""Hostile input at ingest: each numbered case of the integrity issue, as a regression test.

1 malformed front matter fails closed (admins only, reported); 2 symlinks stay inside the
ingest roots; 3 hidden HTML text is dropped; 4 duplicate anchors give unique ids and a
truthful re-ingest; 5 a NUL byte anywhere costs one file, never the run; 6 dotfiles, FIFOs
and device links are skipped with a reason, UTF-16/32 with a BOM is decoded; 7 per-file
limits (chunks, time) with reasons, and progress on stderr even with --json. Where a case
touches the store it runs on both backends (files and a real PostgreSQL).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from footnote.ingest.chunking import Chunker
from footnote.ingest.parsers import parse_file
from footnote.ingest.pipeline import ingest
from footnote.models.embeddings import load_embeddings
from footnote.store.types import Caller
from footnote.tools.search import SearchRequest, search
from tests.conftest import Locate, RunCli

SECRET = "zanzibar"


def sources_found(index: str, query: str, *, groups: tuple[str, ...] = ("everyone",),
                  admin: bool = False) -> set[str]:  # fmt: skip
    hits = search(
        SearchRequest(query=query, index_dir=index, k=50, stage="bm25",
                      caller=Caller(groups=frozenset(groups), admin=admin))
    )  # fmt: skip
    return {hit.chunk.source for hit in hits}


# --- 1. access fails closed ---------------------------------------------------------------

MALFORMED_FRONT_MATTER = {
    "unclosed.md": "---\naccess: [hr]\n\n# P\n\n{secret}\n",
    "blank-before-close.md": "---\naccess: [hr]\n\n# P\n\nIntro.\n\n---\n\n{secret}\n",
    "capitalised.md": "---\nAccess: [hr]\n---\n# P\n\n{secret}\n",
    "upper.md": "---\nACCESS: [hr]\n---\n# P\n\n{secret}\n",
    "both-cases.md": "---\naccess: [hr]\nAccess: [everyone]\n---\n# P\n\n{secret}\n",
    "duplicate.md": "---\naccess: [hr]\naccess: [everyone]\n---\n# P\n\n{secret}\n",
    "duplicate-simple.md": "---\ntitle: A: b\naccess: [hr]\naccess: [everyone]\n---\n{secret}\n",
    "toml-broken.md": "+++\naccess = [hr\n+++\n# P\n\n{secret}\n",
    "toml-capitalised.md": '+++\nAccess = ["hr"]\n+++\n# P\n\n{secret}\n',
    "not-yaml.md": "---\naccess: [hr\n  nested: {{broken\n---\n{secret}\n",
    "not-a-mapping.md": "---\n- access: [hr]\n---\n{secret}\n",
    "empty-access.md": "---\naccess:\n---\n{secret}\n",
    "empty-list.md": "---\naccess: []\n---\n{secret}\n",
    "number.md": "---\naccess: 42\n---\n{secret}\n",
    "numbers.md": "---\naccess: [1, 2]\n---\n{secret}\n",
    "nested.md": "---\naccess: [[hr]]\n---\n{secret}\n",
    "mapping.md": "---\naccess: {{hr: true}}\n---\n{secret}\n",
    "blank-name.md": "---\naccess: ['']\n---\n{secret}\n",
    "bracket-string.md": "---\ntitle: A: b\naccess: [hr\n---\n{secret}\n",
    "leading-blank.md": "\n---\naccess: [hr]\n---\n{secret}\n",
    "indented-fence.md": "  ---\naccess: [hr]\n---\n{secret}\n",
    "fence-comment.md": "--- # meta\naccess: [hr]\n---\n{secret}\n",
    "crlf-unclosed.md": "---\r\naccess: [hr]\r\n\r\n{secret}\r\n",
    "tab-indented-key.md": "---\n\taccess: [hr]\n---\n{secret}\n",
    "python-tag.md": "---\naccess: !!python/object:os.system [hr]\n---\n{secret}\n",
    "flow-mapping.md": "---\n{{title: Payroll, access: [hr]}}\n---\n{secret}\n",
    "tagged-map.md": "---\n!!map {{access: [hr]}}\n---\n{secret}\n",
    "explicit-key.md": "---\n? access\n: [hr]\n---\n{secret}\n",
    "merge-key.md": "---\nbase: &base\n  access: [hr]\n<<: *base\ntitle: T\n---\n{secret}\n",
    "merge-key-only.md": "---\ntitle: T\n<<: {{access: [hr]}}\n---\n{secret}\n",
    "zero-width-key.md": "---\nacc\u200bess: [hr]\n---\n{secret}\n",
    "homoglyph-key.md": "---\n\u0430ccess: [hr]\n---\n{secret}\n",
    "homoglyph-toml-key.md": '+++\n"acce\u0455s" = ["hr"]\n+++\n{secret}\n',
    "empty-block-first.md": "---\n---\n---\naccess: [hr]\n---\n{secret}\n",
    "rule-then-front-matter.md": "---\nA rule.\n---\n---\naccess: [hr]\n---\n{secret}\n",
    "yaml-directive.md": "%YAML 1.2\n---\naccess: [hr]\n---\n{secret}\n",
    "tag-directive.md": "%TAG ! tag:x,2000:\n---\naccess: [hr]\n---\n{secret}\n",
    "line-separators.md": "---\u2028access: [hr]\u2028---\n{secret}\n",
    "paragraph-separator.md": "---\u2029access: [hr]\n---\n{secret}\n",
    "next-line.md": "---\x85access: [hr]\n---\n{secret}\n",
    "text-unclosed.txt": "---\naccess: [hr]\n\n{secret}\n",
    "text-capitalised.txt": "---\nAccess: [hr]\n---\n{secret}\n",
    "text-empty-block-first.txt": "---\n---\n---\naccess: [hr]\n---\n{secret}\n",
    "text-yaml-directive.txt": "%YAML 1.2\n---\naccess: [hr]\n---\n{secret}\n",
}


@pytest.mark.parametrize("name", sorted(MALFORMED_FRONT_MATTER))
def test_malformed_front_matter_is_admin_only_with_a_reason(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    path.write_text(MALFORMED_FRONT_MATTER[name].format(secret=SECRET), newline="")
    doc = parse_file(path, name)
    assert doc.access == [] and doc.access_problem, (doc.access, doc.access_problem)
    assert any(SECRET in s.text for s in doc.sections), "an admin can still find the text"


@pytest.mark.parametrize(
    ("text", "groups"),
    [
        ("---\naccess: [hr]\n---\nBody.\n", ["hr"]),
        ("---\naccess: hr, finance\n---\nBody.\n", ["hr", "finance"]),
        ('+++\naccess = ["hr"]\ntitle = "T"\n+++\nBody.\n', ["hr"]),
        ("---\ntitle: Keys: how to rotate\naccess: [hr]\n---\nBody.\n", ["hr"]),
        ("---\ntitle: T\n---\nBody.\n", None),
        ("---\nJust a rule, then prose.\n---\nBody.\n", None),
        ("Body without front matter.\n", None),
    ],
)
def test_clean_front_matter_is_read(tmp_path: Path, text: str, groups: list[str] | None) -> None:
    for name in ("doc.md", "doc.txt"):  # a text file's front matter is honoured as well
        path = tmp_path / name
        path.write_text(text)
        doc = parse_file(path, name)
        assert doc.access_problem is None, name
        assert doc.access == groups, name
        if groups is not None:
            assert all("access" not in s.text for s in doc.sections), name


def test_a_text_files_front_matter_gives_its_title_and_leaves_its_body(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("---\ntitle: Payroll notes\naccess: [hr]\nowner: ops\n---\nPaid monthly.\n")
    doc = parse_file(path, "notes.txt")
    assert (doc.title, doc.access, doc.metadata) == ("Payroll notes", ["hr"], {"owner": "ops"})
    assert [s.text for s in doc.sections] == ["Paid monthly."]
    assert doc.sections[0].line_start == 6  # line numbers still match the file


def test_malformed_front_matter_is_reported_and_hidden(locate: Locate, tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    for name, text in MALFORMED_FRONT_MATTER.items():
        (docs / name).write_text(text.format(secret=SECRET), newline="")
    (docs / "open.md").write_text(f"# Open\n\nThe {SECRET} notes anyone may read.\n")
    index = locate()
    summary = ingest([docs], index)
    assert not summary.failed, summary.failed
    assert set(summary.restricted) == set(MALFORMED_FRONT_MATTER)
    assert all(reason for reason in summary.restricted.values())
    assert sources_found(index, SECRET) == {"open.md"}
    assert sources_found(index, SECRET, groups=("hr", "everyone")) == {"open.md"}
    assert sources_found(index, SECRET, admin=True) == {"open.md", *MALFORMED_FRONT_MATTER}
    again = ingest([docs], index)  # unchanged files are still reported as admins-only
    assert set(again.restricted) == set(MALFORMED_FRONT_MATTER)
    assert sorted(again.unchanged) == sorted([*MALFORMED_FRONT_MATTER, "open.md"])


def test_cli_lists_admin_only_files_and_exits_1(tmp_path: Path, run_cli: RunCli) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "p.md").write_text(f"---\naccess: [hr]\n\n# P\n\n{SECRET}\n")
    result = run_cli("ingest", str(docs), "--index", str(tmp_path / "index"))
    assert result.returncode == 1, result.stderr
    assert "admins only: p.md: front matter opened with --- is never closed" in result.stdout
    found = run_cli("search", SECRET, "--index", str(tmp_path / "index"), "--json")
    assert found.returncode == 0 and json.loads(found.stdout) == []


# --- 2 and 6. the ingest root is a boundary; nothing is dropped silently --------------------


def hostile_tree(tmp_path: Path) -> tuple[Path, Path]:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.md").write_text(f"# Outside\n\nThe {SECRET} outside the root.\n")
    docs = tmp_path / "docs"
    (docs / "inner").mkdir(parents=True)
    (docs / "good.md").write_text("# Good\n\nAn ordinary page about rotation.\n")
    (docs / "inner" / "target.md").write_text(f"# Target\n\nThe {SECRET} inside the root.\n")
    (docs / "passwd.txt").symlink_to("/etc/passwd")
    (docs / "status.txt").symlink_to("/proc/self/status")
    (docs / "zero.txt").symlink_to("/dev/zero")
    (docs / "outside-folder").symlink_to(outside, target_is_directory=True)
    (docs / "outside.md").symlink_to(outside / "secret.md")
    (docs / "inside.md").symlink_to(docs / "inner" / "target.md")
    (docs / "..name.md").write_text(f"# Dots\n\n{SECRET}\n")
    (docs / ".hidden").mkdir()
    (docs / ".hidden" / "x.md").write_text(f"# Hidden\n\n{SECRET}\n")
    os.mkfifo(docs / "pipe.md")
    (docs / "backup.zip").write_bytes(b"PK\x03\x04")
    return docs, outside


def test_symlinks_and_special_files_are_skipped_with_reasons(tmp_path: Path) -> None:
    docs, _ = hostile_tree(tmp_path)
    summary = ingest([docs], tmp_path / "index")  # reading the FIFO or /dev/zero would hang
    assert sorted(summary.added) == ["good.md", "inner/target.md"]
    assert not summary.failed
    expected = {
        "passwd.txt": "symlink",
        "status.txt": "symlink",
        "zero.txt": "symlink",
        "outside-folder": "symlink",
        "outside.md": "symlink",
        "inside.md": "symlink",
        "..name.md": "hidden file",
        ".hidden": "hidden folder",
        "pipe.md": "FIFO",
        "backup.zip": "unsupported file type .zip",
    }
    assert set(summary.skipped) == set(expected)
    for path, reason in expected.items():
        assert reason in summary.skipped[path], (path, summary.skipped[path])
    assert sources_found(str(tmp_path / "index"), SECRET) == {"inner/target.md"}
    assert sources_found(str(tmp_path / "index"), "root", admin=True) == {"inner/target.md"}


def test_follow_symlinks_stays_inside_the_roots(tmp_path: Path) -> None:
    docs, _ = hostile_tree(tmp_path)
    summary = ingest([docs], tmp_path / "index", follow_symlinks=True)
    assert sorted(summary.added) == ["good.md", "inner/target.md", "inside.md"]
    for outside in ("passwd.txt", "status.txt", "zero.txt", "outside-folder", "outside.md"):
        assert "outside the ingest roots" in summary.skipped[outside], summary.skipped[outside]
    assert "pipe.md" in summary.skipped and "..name.md" in summary.skipped


def test_cli_json_lists_every_skipped_path(tmp_path: Path, run_cli: RunCli) -> None:
    docs, _ = hostile_tree(tmp_path)
    result = run_cli("ingest", str(docs), "--index", str(tmp_path / "index"), "--json")
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    skipped = {item["path"]: item["reason"] for item in summary["skips"]}
    assert summary["skipped"] == len(skipped) == 10
    assert all(skipped.values())


def test_same_relative_path_under_two_roots_is_kept_under_distinct_names(tmp_path: Path) -> None:
    for root, word in (("a", "alpha"), ("b", "bravo")):
        (tmp_path / root).mkdir()
        (tmp_path / root / "x.md").write_text(f"# X\n\nThe {word} page.\n")
    summary = ingest([tmp_path / "a", tmp_path / "b"], tmp_path / "index")
    assert sorted(summary.added) == ["b/x.md", "x.md"] and not summary.skipped
    assert sources_found(str(tmp_path / "index"), "bravo") == {"b/x.md"}
    assert sources_found(str(tmp_path / "index"), "alpha") == {"x.md"}


@pytest.mark.parametrize(
    ("encoding", "bom"),
    [("utf-16-le", b"\xff\xfe"), ("utf-16-be", b"\xfe\xff"), ("utf-32-le", b"\xff\xfe\x00\x00"),
     ("utf-32-be", b"\x00\x00\xfe\xff")],
)  # fmt: skip
@pytest.mark.parametrize("suffix", [".md", ".txt", ".html"])
def test_utf16_and_utf32_with_bom_are_decoded(
    tmp_path: Path, encoding: str, bom: bytes, suffix: str
) -> None:
    text = "<p>Café crème: rotation every 90 days.</p>" if suffix == ".html" else (
        "# Café\n\nCrème: rotation every 90 days.\n"
    )  # fmt: skip
    path = tmp_path / f"doc{suffix}"
    path.write_bytes(bom + text.encode(encoding))
    doc = parse_file(path, path.name)
    assert "rotation every 90 days" in " ".join(s.text for s in doc.sections)


# --- 3. hidden HTML text ----------------------------------------------------------------------


def test_hidden_html_text_is_not_indexed(tmp_path: Path) -> None:
    page = tmp_path / "page.html"
    page.write_text(
        "<html><body><main><h1>Keys</h1><p>Rotate keys every 90 days.</p>"
        f'<p style="display:none">{SECRET} one</p>'
        f'<div style="color: red; visibility : hidden !important">{SECRET} two</div>'
        f'<span aria-hidden="true">{SECRET} three</span>'
        f"<p hidden>{SECRET} four</p>"
        f'<p style="opacity:0">{SECRET} five</p>'
        f'<p style="font-size:0px">{SECRET} six</p>'
        f'<h2 style="display: none" id="h">{SECRET} heading</h2><p>{SECRET} seven</p>'
        '<p style="font-size:0.9em">Small but visible.</p>'
        "</main></body></html>"
    )
    doc = parse_file(page, "page.html")
    text = " ".join(s.text for s in doc.sections) + " ".join(" ".join(s.headings)
                                                             for s in doc.sections)  # fmt: skip
    assert SECRET not in text.replace(f"{SECRET} seven", "")
    assert "Rotate keys every 90 days." in text and "Small but visible." in text


# --- 4. ids unique by construction ----------------------------------------------------------


def test_duplicate_html_ids_give_unique_chunk_ids_and_truthful_reingest(
    locate: Locate, tmp_path: Path
) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "page.html").write_text(
        "<html><body><main>"
        '<h2 id="s">First</h2><p>Alpha section text.</p>'
        '<h2 id="s">Second</h2><p>Bravo section text.</p>'
        '<h2 id="s-1">Third</h2><p>Charlie section text.</p>'
        "</main></body></html>"
    )
    (docs / "other.md").write_text("# Other\n\nDelta text.\n")
    index = locate()
    first = ingest([docs], index)
    assert not first.failed
    admin = {w: sources_found(index, w, admin=True) for w in ("alpha", "bravo", "charlie")}
    assert all(found == {"page.html"} for found in admin.values()), admin
    (docs / "other.md").write_text("# Other\n\nEcho text, changed.\n")
    second = ingest([docs], index)
    assert (second.updated, second.unchanged, second.added, second.deleted) == (
        ["other.md"], ["page.html"], [], []
    )  # fmt: skip
    for word in ("alpha", "bravo", "charlie"):
        assert sources_found(index, word, admin=True) == {"page.html"}, word


def test_chunk_ids_are_unique_for_colliding_anchors() -> None:
    from footnote.ingest.documents import ParsedDocument, Section

    model = load_embeddings("")
    doc = ParsedDocument(
        source="a#b.md",
        title="T",
        sections=[Section(text=f"text {i}", anchor=a) for i, a in enumerate(
            ["s", "s", "s-1", "s-1", "s-2", None, "top"])],
    )  # fmt: skip
    chunks = Chunker(model).split_document(doc, date=None, access=["everyone"])
    ids = [c.id for c in chunks]
    assert len(set(ids)) == len(ids)
    assert ids[:3] == ["a%23b.md#s:0", "a%23b.md#s-1:0", "a%23b.md#s-1-1:0"]


# --- 5. one bad file never aborts a run -------------------------------------------------------


def test_nul_after_the_sniffed_bytes_fails_one_file(locate: Locate, tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "late-nul.txt").write_bytes(b"plain words " * 1000 + b"\x00 and more words\n")
    (docs / "nul-front-matter.md").write_text('---\nowner: "a\\0b"\n---\nBody text.\n')
    (docs / "surrogate.md").write_text('---\ntitle: "\\ud800"\n---\nBody text.\n')
    (docs / "good.md").write_text("# Good\n\nKey rotation every 90 days.\n")
    index = locate()
    summary = ingest([docs], index)
    assert summary.added == ["good.md"]
    assert set(summary.failed) == {"late-nul.txt", "nul-front-matter.md", "surrogate.md"}
    assert "NUL" in summary.failed["late-nul.txt"]
    assert sources_found(index, "rotation") == {"good.md"}


# --- 7. limits and progress --------------------------------------------------------------------


def test_minified_line_is_chunked_fast_and_sensibly(tmp_path: Path) -> None:
    path = tmp_path / "app.min.js"
    path.write_text("".join(f"var a{i}=function(b){{return b*{i}}};" for i in range(2000)))
    assert path.stat().st_size > 50_000
    summary = ingest([path], tmp_path / "index")
    assert not summary.failed and summary.chunks < 200, summary.chunks  # was 1,430 tiny ones


def test_single_long_line_and_entity_page_stay_bounded(tmp_path: Path) -> None:
    model = load_embeddings("")
    line = tmp_path / "line.txt"
    line.write_text(" ".join(f"word{i % 997}" for i in range(40_000)))  # ~300 KB, one line
    blob = tmp_path / "blob.txt"
    blob.write_text("x" * 300_000)  # one 300 KB "word" the tokenizer reads as [UNK]
    page = tmp_path / "entities.html"
    page.write_text("<html><body><p>" + "&lt;&amp;" * 50_000 + "</p></body></html>")
    chunker = Chunker(model)
    for path in (line, blob, page):
        doc = parse_file(path, path.name)
        chunks = chunker.split_document(doc, date=None, access=["everyone"])
        assert all(model.count_tokens(c.text) <= 256 and len(c.text) <= 2048 for c in chunks)
        covered = sum(len(c.text) for c in chunks)
        assert covered >= 0.95 * sum(len(s.text) for s in doc.sections), path.name
        assert len(chunks) <= covered / 150 + 5, (path.name, len(chunks))


def test_chunk_cap_and_time_budget_fail_one_file_each(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from footnote.ingest import parsers
    from footnote.ingest.isolation import WORKER_ENV

    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "many.md").write_text("".join(f"# H{i}\n\nPart {i}.\n\n" for i in range(50)))
    (docs / "slow.html").write_text("<p>slow</p>")
    (docs / "good.md").write_text("# Good\n\nFine.\n")
    real = parsers.PARSERS[".html"]

    def crawl(data: bytes, path: Path, source: str) -> object:
        deadline = time.monotonic() + 30  # a parser stuck in a loop, far past the 1 s budget
        while time.monotonic() < deadline:
            pass
        return real(data, path, source)

    monkeypatch.setitem(parsers.PARSERS, ".html", crawl)
    monkeypatch.setenv(WORKER_ENV, "1")  # the stand-in parser runs here, not in a worker
    summary = ingest([docs], tmp_path / "index", max_chunks=20, max_seconds=1)
    assert summary.added == ["good.md"]
    assert "too many chunks: 50 > limit 20" in summary.failed["many.md"]
    assert "time budget exceeded" in summary.failed["slow.html"]


def test_progress_goes_to_stderr_with_json(tmp_path: Path, run_cli: RunCli) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    for i in range(3):
        (docs / f"d{i}.md").write_text(f"# D{i}\n\nText {i}.\n")
    result = run_cli("ingest", str(docs), "--index", str(tmp_path / "index"), "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["added"] == 3
    assert "parse: 3/3" in result.stderr and "embed: 3/3" in result.stderr
