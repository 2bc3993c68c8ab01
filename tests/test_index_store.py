"""The index as users depend on it: right answers, stable ids, safe loading, atomic updates.

Everything here uses the real offline embeddings, so ranking and token limits are the ones
`footnote` ships with. Indexes that a test changes are built or copied under `tmp_path`; the
session's `handbook_index` is only read.
"""

from __future__ import annotations

import json
import os
import pickle
import random
import re
import shutil
import signal
import string
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from footnote.ingest.parsers.common import HEADING_MAX
from footnote.ingest.pipeline import ingest
from footnote.models.embeddings import MINILM_MAX_TOKENS, MiniLMEmbeddings, load_embeddings
from footnote.store.files import current_version, load_index
from footnote.store.text import embedding_text
from footnote.store.types import Chunk, IndexCorrupt, IndexMismatch
from footnote.tools.search import SearchRequest, search

QUESTION = "How often do I have to change my API key?"
REPO = Path(__file__).resolve().parents[1]
HANDBOOK = REPO / "samples" / "handbook"
RunCli = Callable[..., subprocess.CompletedProcess[str]]


def chunk_ids(index_dir: Path) -> list[str]:
    return [c.id for c in load_index(index_dir).chunks]


def version_dir(index_dir: Path) -> Path:
    version = current_version(index_dir)
    assert version is not None
    return index_dir / "versions" / version


def wait_for(condition: Callable[[], bool], proc: subprocess.Popen[bytes], timeout: float) -> bool:
    """Poll until `condition` holds; False if the process ended first. Fails on timeout."""
    deadline = time.monotonic() + timeout
    pause = threading.Event()
    while time.monotonic() < deadline:
        if condition():
            return True
        if proc.poll() is not None:
            return condition()
        pause.wait(0.001)
    pytest.fail(f"condition not reached within {timeout}s")


# --- retrieval on the sample handbook -------------------------------------------------


def test_worked_example_ranks_key_rotation_first(handbook_index: Path) -> None:
    hits = search(SearchRequest(query=QUESTION, index_dir=handbook_index))

    assert hits, "no results for the worked example"
    top = hits[0].chunk
    assert top.source == "keys.md"
    assert "90 days" in top.text


def test_chunk_ids_are_readable_and_stable_across_rebuild(
    tmp_path: Path, handbook_index: Path
) -> None:
    shared = chunk_ids(handbook_index)
    assert "keys.md#rotation:0" in shared
    for cid in shared:
        assert re.fullmatch(r"[\w.-]+(/[\w.-]+)*#[\w.-]+:\d+", cid), cid

    index = tmp_path / "index"
    first = ingest([HANDBOOK], index)
    before = chunk_ids(index)
    rebuilt = ingest([HANDBOOK], index, rebuild=True)

    assert rebuilt.version != first.version, "--rebuild must publish a new version"
    assert rebuilt.embedded_chunks == len(before), "--rebuild must re-embed everything"
    assert chunk_ids(index) == before == shared


# --- chunk size -----------------------------------------------------------------------

_WORDS = [
    "index", "chunk", "token", "embedding", "retrieval", "citation", "heading", "section",
    "paragraph", "vector", "keyword", "rotation", "deployment", "latency", "throughput",
    "replica", "snapshot", "manifest", "checksum",
]  # fmt: skip


def long_markdown(rng: random.Random) -> tuple[str, dict[str, str]]:
    """A document built to defeat naive splitting; returns it and each section's body."""
    sentences = [
        " ".join(rng.choice(_WORDS) for _ in range(rng.randint(6, 30))).capitalize() + "."
        for _ in range(400)
    ]
    code = "\n".join(
        f"def handler_{i}(request, retries={i}):\n"
        f"    value = compute_{rng.choice(_WORDS)}(request.payload[{i}:], retries)\n"
        f"    return {{'status': {200 + i % 7}, 'body': value}}\n"
        for i in range(120)
    )
    # Token-dense and unbreakable by whitespace: the splitter must fall back to characters.
    blob = "".join(rng.choice(string.ascii_letters + string.digits + "+/=") for _ in range(5000))
    listing = "\n".join(
        f"- item {i}: {rng.choice(_WORDS)} {rng.choice(_WORDS)}" for i in range(300)
    )
    long_heading = " ".join(rng.choice(_WORDS) for _ in range(60))
    bodies = {
        "Huge paragraph": " ".join(sentences),
        "Long code block": f"```python\n{code}```",
        "Unbroken line": blob,
        "Long list": listing,
        long_heading: "A short body under a very long heading still has to fit.",
    }
    parts = ["# Stress test", ""]
    for heading, body in bodies.items():
        parts += [f"## {heading}", "", body, ""]
    return "\n".join(parts), bodies


def uncovered(body: str, pieces: list[str]) -> str:
    """The non-space characters of `body` that no piece (in order) covers."""
    covered = bytearray(len(body))
    low = 0
    for piece in pieces:
        at = body.find(piece, low)
        assert at >= 0, f"chunk text not found verbatim in its section: {piece[:60]!r}"
        covered[at : at + len(piece)] = b"\x01" * len(piece)
        low = at + 1
    return "".join(ch for ch, c in zip(body, covered, strict=True) if not c and not ch.isspace())


def test_no_chunk_exceeds_the_model_limit(tmp_path: Path, handbook_index: Path) -> None:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    text, bodies = long_markdown(random.Random(1234))
    (corpus / "stress.md").write_text(text, encoding="utf-8")
    index = tmp_path / "index"
    summary = ingest([corpus], index)
    assert summary.failed == {}

    counter = load_embeddings()
    assert isinstance(counter, MiniLMEmbeddings)
    chunks = [*load_index(index).chunks, *load_index(handbook_index).chunks]
    sizes = {c.id: counter.count_tokens(embedding_text(c)) for c in chunks}
    too_big = {cid: n for cid, n in sizes.items() if n > MINILM_MAX_TOKENS}
    assert too_big == {}

    by_section: dict[str, list[str]] = {}
    for chunk in load_index(index).chunks:
        by_section.setdefault(chunk.section.removeprefix("Stress test > "), []).append(chunk.text)
    # a heading's path keeps its first HEADING_MAX characters (a long heading is repeated in
    # every section under it), so each section is known by its heading cut there
    assert set(by_section) == {heading[:HEADING_MAX] for heading in bodies}
    for heading, body in bodies.items():
        section = by_section[heading[:HEADING_MAX]]
        if counter.count_tokens(body) > MINILM_MAX_TOKENS:
            assert len(section) > 1, f"{heading[:30]} was not split"
        assert uncovered(body, section) == "", f"text lost in {heading[:30]}"


# --- loading never unpickles ----------------------------------------------------------


class Payload:
    """Unpickling this runs code that writes a marker file: proof that a loader unpickled."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (exec, (f"open({str(self.marker)!r}, 'w').write('unpickled')",))


def pickled_npy(path: Path, marker: Path) -> None:
    np.save(path, np.array([Payload(marker), 1], dtype=object), allow_pickle=True)


def plant_strays(index: Path, marker: Path) -> None:
    """Files where LangChain's FAISS.load_local or bm25s would look for pickles."""
    vdir = version_dir(index)
    payload = pickle.dumps(Payload(marker))
    for folder in (index, vdir, vdir / "bm25"):
        (folder / "index.pkl").write_bytes(payload)
        (folder / "index.faiss").write_bytes(payload)
    (vdir / "docstore.pkl").write_bytes(payload)
    (vdir / "bm25" / "corpus.pkl").write_bytes(payload)
    (vdir / "bm25" / "retriever.pkl").write_bytes(payload)
    pickled_npy(vdir / "bm25" / "nonoccurrence_array.index.npy", marker)


def set_checksum(index: Path, name: str) -> None:
    """Rewrite the manifest as an attacker who can write the index directory would."""
    import hashlib

    vdir = version_dir(index)
    manifest = json.loads((vdir / "manifest.json").read_text("utf-8"))
    manifest["checksums"][name] = hashlib.sha256((vdir / name).read_bytes()).hexdigest()
    (vdir / "manifest.json").write_text(json.dumps(manifest), "utf-8")


def test_payload_is_live(tmp_path: Path) -> None:
    """The planted files really run code when unpickled, so the tests below mean something."""
    armed = tmp_path / "armed"
    pickle.loads(pickle.dumps(Payload(armed)))
    assert armed.read_text() == "unpickled"
    armed.unlink()
    pickled_npy(tmp_path / "x.npy", armed)
    np.load(tmp_path / "x.npy", allow_pickle=True)
    assert armed.exists()


def test_stray_pickles_are_ignored(tmp_path: Path, handbook_index: Path, run_cli: RunCli) -> None:
    index = tmp_path / "index"
    shutil.copytree(handbook_index, index)
    marker = tmp_path / "marker"
    plant_strays(index, marker)

    loaded = load_index(index)
    assert len(loaded.chunks) == len(load_index(handbook_index).chunks)
    hits = search(SearchRequest(query=QUESTION, index_dir=index))
    assert hits[0].chunk.source == "keys.md"
    result = run_cli("search", QUESTION, "--index", str(index), "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)[0]["source"] == "keys.md"
    assert not marker.exists(), "a stray pickle was loaded"


@pytest.mark.parametrize("rewrite_manifest", [False, True], ids=["checksum-caught", "forged"])
@pytest.mark.parametrize("target", ["bm25/data.csc.index.npy", "vectors.faiss"])
def test_pickled_index_file_is_refused(
    tmp_path: Path, handbook_index: Path, target: str, rewrite_manifest: bool
) -> None:
    index = tmp_path / "index"
    shutil.copytree(handbook_index, index)
    marker = tmp_path / "marker"
    plant_strays(index, marker)
    path = version_dir(index) / target
    if target.endswith(".npy"):
        pickled_npy(path, marker)
    else:
        path.write_bytes(pickle.dumps(Payload(marker)))
    if rewrite_manifest:
        set_checksum(index, target)

    with pytest.raises(IndexCorrupt) as caught:
        load_index(index)

    assert str(index) in str(caught.value)
    if not rewrite_manifest:
        assert target in str(caught.value)
    assert not marker.exists(), "loading the index unpickled a planted file"


def test_pickled_index_file_fails_cleanly_in_cli(
    tmp_path: Path, handbook_index: Path, run_cli: RunCli
) -> None:
    index = tmp_path / "index"
    shutil.copytree(handbook_index, index)
    marker = tmp_path / "marker"
    pickled_npy(version_dir(index) / "bm25" / "indices.csc.index.npy", marker)
    set_checksum(index, "bm25/indices.csc.index.npy")

    result = run_cli("search", QUESTION, "--index", str(index), "--json")

    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    assert "rebuild" in result.stderr
    assert not marker.exists()


# --- tampering and mismatches ---------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "chunks.sqlite",
        "columns/access.rows.npy",
        "columns/access.values.json",
        "files.json",
        "vectors.faiss",
        "bm25/vocab.index.json",
    ],
)
def test_tampered_file_is_reported_by_name(tmp_path: Path, handbook_index: Path, name: str) -> None:
    index = tmp_path / "index"
    shutil.copytree(handbook_index, index)
    path = version_dir(index) / name
    data = bytearray(path.read_bytes())
    if name == "chunks.sqlite":
        at = data.index(b"90 days")
        data[at : at + 2] = b"10"  # still a valid database and valid JSON, silently wrong
    elif name == "columns/access.values.json":
        data = bytearray(json.dumps([["everyone"]] * len(json.loads(data))).encode())
    else:
        data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))

    with pytest.raises(IndexCorrupt, match=re.escape(name)):
        load_index(index)


def test_other_embedding_model_is_refused(handbook_index: Path) -> None:
    with pytest.raises(IndexMismatch) as caught:
        load_index(handbook_index, embedding_model="openai:text-embedding-3-small")
    message = str(caught.value)
    assert "openai:text-embedding-3-small" in message
    assert "footnote:minilm-l6-v2-int8" in message


def test_other_dimension_is_refused(handbook_index: Path) -> None:
    with pytest.raises(IndexMismatch) as caught:
        load_index(handbook_index, dimension=1536)
    assert "384" in str(caught.value)
    assert "1536" in str(caught.value)


# --- atomic publication under SIGKILL -------------------------------------------------

KILLED_INGEST = r"""
import sys

import footnote.store.files as store
from footnote.ingest.pipeline import ingest

corpus, index, gate = sys.argv[1:4]


def hold() -> None:
    sys.stdin.read()  # the parent never writes: it kills us here


if gate == "staging":
    # Stall after chunks, files and vectors are staged, before BM25 and the manifest.
    store._write_bm25 = lambda directory, chunks: hold()
elif gate == "publish":
    # Stall once the version folder is complete and renamed, before CURRENT is replaced.
    real_fsync = store._fsync

    def fsync(path):
        if path.name.startswith("CURRENT.") and path.name.endswith(".tmp"):  # this writer's
            hold()
        real_fsync(path)

    store._fsync = fsync
print(ingest([corpus], index).version, flush=True)
"""


@pytest.fixture(scope="module")
def many_notes(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """~300 small Markdown files: enough that an ingest takes a few seconds."""
    corpus = tmp_path_factory.mktemp("notes")
    rng = random.Random(99)
    for i in range(300):
        words = " ".join(rng.choice(_WORDS) for _ in range(40))
        (corpus / f"note-{i:03d}.md").write_text(
            f"# Note {i}\n\nThis is note {i}. {words.capitalize()}.\n", encoding="utf-8"
        )
    return corpus


@pytest.mark.parametrize("gate", ["none", "staging", "publish"])
def test_killed_ingest_leaves_the_old_version_live(
    tmp_path: Path, many_notes: Path, gate: str
) -> None:
    index = tmp_path / "index"
    old = ingest([HANDBOOK], index)
    old_ids = chunk_ids(index)
    old_chunks = load_index(index).chunks
    versions = index / "versions"

    def staging() -> bool:
        return any(p.name.startswith(".staging-") for p in versions.iterdir())

    def renamed() -> bool:
        return any(index.glob("CURRENT.*.tmp"))  # each writer's pointer has its own name

    proc = subprocess.Popen(
        [sys.executable, "-c", KILLED_INGEST, str(many_notes), str(index), gate],
        cwd=REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "TOKENIZERS_PARALLELISM": "false"},
    )
    try:
        seen = wait_for(renamed if gate == "publish" else staging, proc, timeout=300)
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()

    loaded = load_index(index)  # never half-written, whenever the kill landed
    if gate == "none":
        # The publish window is short: the kill may land in it or after it. Either way the
        # index is one whole version.
        assert proc.returncode in (0, -signal.SIGKILL), err.decode()
        if loaded.version == old.version:
            assert [c.id for c in loaded.chunks] == old_ids
        else:
            assert proc.returncode == 0
            notes = {f"note-{i:03d}.md" for i in range(300)}  # added beside the handbook
            assert {c.source for c in loaded.chunks} == notes | {c.source for c in old_chunks}
    else:
        assert seen, err.decode()
        assert proc.returncode == -signal.SIGKILL, err.decode()
        assert loaded.version == old.version
        assert [c.id for c in loaded.chunks] == old_ids
        leftovers = [p for p in versions.iterdir() if p.name != old.version]
        assert leftovers, "the kill should have left an unpublished version behind"
        if gate == "staging":
            assert all(not (p / "manifest.json").exists() for p in leftovers)
        else:
            assert any((p / "manifest.json").exists() for p in leftovers)

    fresh = tmp_path / "fresh"
    fresh.mkdir()
    (fresh / "after.md").write_text("# After\n\nThe index recovers after a crash.\n", "utf-8")
    recovered = ingest([fresh], index)
    assert load_index(index).version == recovered.version
    # It adds its root beside the handbook's documents, which stay (they came from another root).
    assert "after.md#after:0" in chunk_ids(index) and set(old_ids) <= set(chunk_ids(index))


# --- incremental ingest ---------------------------------------------------------------


def test_incremental_ingest_reembeds_only_what_changed(tmp_path: Path) -> None:
    corpus = tmp_path / "handbook"
    shutil.copytree(HANDBOOK, corpus)
    index = tmp_path / "index"
    all_files = sorted(p.name for p in corpus.iterdir())

    first = ingest([corpus], index)
    assert sorted(first.added) == all_files

    again = ingest([corpus], index)
    assert sorted(again.unchanged) == all_files
    assert (again.added, again.updated, again.deleted) == ([], [], [])
    assert again.embedded_chunks == 0
    assert again.version == first.version == current_version(index)

    vpn = corpus / "vpn.md"
    vpn.write_text(
        vpn.read_text("utf-8") + "\n## Split tunnelling\n\nOnly internal ranges use the VPN.\n",
        "utf-8",
    )
    changed = ingest([corpus], index)
    vpn_chunks = [c for c in load_index(index).chunks if c.source == "vpn.md"]
    assert changed.updated == ["vpn.md"]
    assert changed.added == [] and changed.deleted == []
    assert changed.embedded_chunks == len(vpn_chunks)
    assert "vpn.md#split-tunnelling:0" in {c.id for c in vpn_chunks}
    assert changed.version != first.version

    (corpus / "holidays.md").unlink()
    deleted = ingest([corpus], index)
    assert deleted.deleted == ["holidays.md"]
    assert deleted.embedded_chunks == 0
    assert not [c for c in load_index(index).chunks if c.source == "holidays.md"]
    assert "holidays.md" not in load_index(index).files

    (corpus / "parking.md").write_text("# Parking\n\nThe garage opens at 07:00.\n", "utf-8")
    added = ingest([corpus], index)
    assert added.added == ["parking.md"]
    assert added.embedded_chunks == 1
    assert chunk_ids(index).count("parking.md#parking:0") == 1


# --- bad input ------------------------------------------------------------------------

MAX_BYTES = 4096


def bad_corpus(root: Path) -> dict[str, str]:
    """Good files plus one of each kind of bad input; returns source -> expected reason."""
    root.mkdir()
    (root / "good.md").write_text("# Good\n\nThis file is fine.\n", "utf-8")
    (root / "notes.txt").write_text("Plain notes that are fine too.\n", "utf-8")
    (root / "nested").mkdir()
    (root / "nested" / "deep.md").write_text("# Deep\n\nA nested good file.\n", "utf-8")

    (root / "empty.md").write_bytes(b"")
    (root / "binary.txt").write_bytes(bytes(range(256)) * 4)
    latin1 = "# Caf\u00e9\n\nCr\u00e8me br\u00fbl\u00e9e.\n".encode("latin-1")
    (root / "latin1.md").write_bytes(latin1)
    (root / "corrupt.pdf").write_bytes(b"%PDF-1.7\n1 0 obj << /Type /Catalog >>\nnot a pdf")
    (root / "big.md").write_text("# Big\n\n" + "word " * MAX_BYTES, "utf-8")
    (root / "nested" / "back").symlink_to("..", target_is_directory=True)
    (root / "self.md").symlink_to("self.md")
    (root / "dead.md").symlink_to("missing.md")
    return {
        "empty.md": "empty",
        "binary.txt": "binary",
        "latin1.md": "UTF-8",
        "corrupt.pdf": "PDF",
        "big.md": "too large",
        "nested/back": "loop",
        "self.md": "loop",
        "dead.md": "broken symlink",
    }


def test_bad_files_fail_one_by_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    corpus = tmp_path / "corpus"
    expected = bad_corpus(corpus)
    (corpus / "locked.md").write_text("# Locked\n\nNobody may read this.\n", "utf-8")
    expected["locked.md"] = "Permission denied"

    read: list[str] = []
    real_read_bytes = Path.read_bytes

    def read_bytes(self: Path) -> bytes:
        read.append(self.name)
        if self.name == "locked.md":
            raise PermissionError(13, "Permission denied")
        return real_read_bytes(self)

    monkeypatch.setattr(Path, "read_bytes", read_bytes)
    summary = ingest([corpus], tmp_path / "index", max_bytes=MAX_BYTES)

    assert set(summary.failed) == set(expected)
    for source, reason in expected.items():
        assert reason.lower() in summary.failed[source].lower(), (source, summary.failed[source])
    assert sorted(summary.added) == ["good.md", "nested/deep.md", "notes.txt"]
    assert "big.md" not in read, "an oversized file was read before being refused"
    sources = {c.source for c in load_index(tmp_path / "index").chunks}
    assert sources == {"good.md", "nested/deep.md", "notes.txt"}


def test_cli_ingest_reports_failures_as_json(tmp_path: Path, run_cli: RunCli) -> None:
    corpus = tmp_path / "corpus"
    expected = bad_corpus(corpus)

    result = run_cli(
        "ingest", str(corpus), "--index", str(tmp_path / "index"),
        "--max-bytes", str(MAX_BYTES), "--json",
    )  # fmt: skip

    assert result.returncode == 1, result.stderr
    summary = json.loads(result.stdout)
    assert {"added", "updated", "unchanged", "deleted", "failed", "errors"} <= set(summary)
    assert summary["added"] == 3
    assert summary["failed"] == len(expected)
    errors = {e["source"]: e["error"] for e in summary["errors"]}
    assert set(errors) == set(expected)
    assert all(reason.strip() for reason in errors.values())


# --- CLI ------------------------------------------------------------------------------


def test_cli_search_json(handbook_index: Path, run_cli: RunCli) -> None:
    result = run_cli("search", QUESTION, "--index", str(handbook_index), "--json", "-k", "3")

    assert result.returncode == 0, result.stderr
    items = json.loads(result.stdout)
    assert isinstance(items, list) and len(items) == 3
    for item in items:
        assert {"id", "score", "source", "section", "text"} <= set(item)
        assert isinstance(item["score"], float)
        Chunk.from_dict({k: v for k, v in item.items() if k != "score"})
    assert items[0]["id"] == "keys.md#rotation:0"
    assert items[0]["section"] == "API keys > Rotation"


@pytest.mark.parametrize("args", [["--help"], ["ingest", "--help"], ["search", "--help"]])
def test_cli_help(run_cli: RunCli, args: list[str]) -> None:
    result = run_cli(*args)
    assert result.returncode == 0, result.stderr
    assert "usage: footnote" in result.stdout
