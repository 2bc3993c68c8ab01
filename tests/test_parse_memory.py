"""Parsing under a memory cap, whatever the format (issue finding 20).

A 1 MB EPUB drove the served indexer to 12 GB, a 14 MB Markdown file to 6.5 GB, XLSX
likewise: only Word and PowerPoint went to the memory-capped parse worker, and what some
parsers built grew faster than their input (a zip's many small members, a shared string
repeated in every cell, a long heading repeated in every section under it). Each bomb here
is generated small on disk; each must fail with its reason while a normal document beside
it is indexed, with the parse worker's peak memory under its cap and the ingesting
process itself not growing with the bomb, and a question must be answered meanwhile.
"""

from __future__ import annotations

import io
import threading
import time
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psutil
import pytest

from footnote.ingest.isolation import MEMORY_ENV
from footnote.ingest.pipeline import ingest
from footnote.tools.search import SearchRequest, search

CAP_MB = 256
PARENT_GROWTH_MB = 400
"""What the ingesting process may grow by while the bombs are read (the embedding model
loaded by the warm-up ingest first): the bombs would take gigabytes."""


# --- the bombs ---------------------------------------------------------------------------


def epub_bomb(chapters: int = 300, chapter_bytes: int = 990_000) -> bytes:
    """A book of many chapters each just under the per-member ratio's floor: under 1 MB on
    disk, 300 MB of XHTML unpacked."""
    paragraph = b"<p>word word word word word</p>"
    page = (
        b'<html xmlns="http://www.w3.org/1999/xhtml"><head><title>t</title></head><body>'
        + paragraph * (chapter_bytes // len(paragraph))
        + b"</body></html>"
    )
    items = "".join(
        f'<item id="c{i}" href="c{i}.xhtml" media-type="application/xhtml+xml"/>'
        for i in range(chapters)
    )
    spine = "".join(f'<itemref idref="c{i}"/>' for i in range(chapters))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as book:
        book.writestr("mimetype", "application/epub+zip", compress_type=zipfile.ZIP_STORED)
        book.writestr(
            "META-INF/container.xml",
            '<?xml version="1.0"?><container version="1.0" '
            'xmlns="urn:oasis:names:tc:opendocument:xmlns:container"><rootfiles>'
            '<rootfile full-path="c.opf" media-type="application/oebps-package+xml"/>'
            "</rootfiles></container>",
        )
        book.writestr(
            "c.opf",
            '<?xml version="1.0"?><package xmlns="http://www.idpf.org/2007/opf" version="3.0">'
            '<metadata xmlns:dc="http://purl.org/dc/elements/1.1/"><dc:title>B</dc:title>'
            f"</metadata><manifest>{items}</manifest><spine>{spine}</spine></package>",
        )
        for i in range(chapters):
            book.writestr(f"c{i}.xhtml", page)
    return out.getvalue()


def xlsx_bomb(rows: int = 2_000, columns: int = 50, string_chars: int = 100_000) -> bytes:
    """One sheet whose every cell names the same 100 KB shared string: 200 KB on disk,
    10 GB of records."""
    import openpyxl
    from openpyxl.utils import get_column_letter

    blank = io.BytesIO()
    workbook = openpyxl.Workbook()
    workbook.active["A1"] = "x"
    workbook.save(blank)
    main = "http://schemas.openxmlformats.org/spreadsheetml/2006/main"
    letters = [get_column_letter(c) for c in range(1, columns + 1)]
    sheet_rows = "".join(
        f'<row r="{r}">'
        + "".join(f'<c r="{c}{r}" t="s"><v>{0 if r > 1 else 1}</v></c>' for c in letters)
        + "</row>"
        for r in range(1, rows + 1)
    )
    replaced = {
        "xl/worksheets/sheet1.xml": f'<?xml version="1.0"?><worksheet xmlns="{main}">'
        f"<sheetData>{sheet_rows}</sheetData></worksheet>",
        "xl/sharedStrings.xml": f'<?xml version="1.0"?><sst xmlns="{main}" uniqueCount="2">'
        f"<si><t>{'s' * string_chars}</t></si><si><t>H</t></si></sst>",
    }
    shared_type = (
        '<Override PartName="/xl/sharedStrings.xml" ContentType="application/'
        'vnd.openxmlformats-officedocument.spreadsheetml.sharedStrings+xml"/></Types>'
    )
    shared_link = (
        '<Relationship Id="rIdShared" Target="sharedStrings.xml" Type="http://schemas.'
        'openxmlformats.org/officeDocument/2006/relationships/sharedStrings"/></Relationships>'
    )
    source = zipfile.ZipFile(blank)
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as book:
        for name in source.namelist():
            data = source.read(name)
            if name == "[Content_Types].xml":
                data = data.replace(b"</Types>", shared_type.encode())
            if name == "xl/_rels/workbook.xml.rels":
                data = data.replace(b"</Relationships>", shared_link.encode())
            ours = replaced.pop(name, None)
            book.writestr(name, data if ours is None else ours)
        for name, text in replaced.items():
            book.writestr(name, text)
    return out.getvalue()


def heading_bomb(sections: int = 20_000, heading_chars: int = 1_000_000) -> bytes:
    """A 1 MB heading over 20,000 short sections: every section's heading path repeated
    it, 20 GB of paths from 1 MB."""
    return b"# " + b"h" * heading_chars + b"\n" + b"## s\nt\n" * sections


def sections_bomb(sections: int = 700_000) -> bytes:
    """4 MB of one-line sections: linear, but more than 256 MB of sections to build."""
    return b"# a\nb\n" * sections


# --- watching memory ---------------------------------------------------------------------


class MemoryWatch:
    """Samples this process's resident memory and each parse worker's own peak (VmHWM)
    every few milliseconds, on a thread, for as long as it runs."""

    def __init__(self) -> None:
        self.me = psutil.Process()
        self.baseline = self.me.memory_info().rss
        self.peak = self.baseline
        self.workers: dict[int, int] = {}
        """Each parse worker seen, by PID, with the highest peak read from it."""
        self.stop = threading.Event()

    def sample(self) -> None:
        self.peak = max(self.peak, self.me.memory_info().rss)
        for child in self.me.children(recursive=True):
            try:
                if "isolation_worker" not in " ".join(child.cmdline()):
                    continue
                status = Path(f"/proc/{child.pid}/status").read_text()
            except (psutil.Error, OSError):
                continue  # it ended between the listing and the read
            kilobytes = next(
                int(line.split()[1]) for line in status.splitlines() if line.startswith("VmHWM")
            )
            self.workers[child.pid] = max(self.workers.get(child.pid, 0), kilobytes << 10)

    def run(self) -> None:
        while not self.stop.wait(0.02):
            self.sample()

    def busy_worker(self, at_least_mb: int) -> bool:
        return any(peak >> 20 >= at_least_mb for peak in self.workers.values())


@contextmanager
def watching() -> Iterator[MemoryWatch]:
    watch = MemoryWatch()
    thread = threading.Thread(target=watch.run, daemon=True)
    thread.start()
    try:
        yield watch
    finally:
        watch.stop.set()
        thread.join()
        watch.sample()


@pytest.fixture
def capped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(MEMORY_ENV, str(CAP_MB))


def warm_up(tmp_path: Path) -> None:
    """One ingest first, so the embedding model and the parse worker count as baseline."""
    folder = tmp_path / "warm"
    folder.mkdir()
    (folder / "warm.md").write_text("# Warm\n\nThe model loads here.\n")
    assert ingest([folder], tmp_path / "warm-index").added == ["warm.md"]


def test_bombs_fail_with_reasons_beside_a_normal_document_within_the_cap(
    tmp_path: Path, capped: None
) -> None:
    warm_up(tmp_path)
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "wombats.md").write_text("# Wombats\n\nWombats graze on grass at dusk.\n")
    bombs = {
        "book.epub": epub_bomb(),
        "sheet.xlsx": xlsx_bomb(),
        "heading.md": heading_bomb(),
        "sections.md": sections_bomb(),
    }
    for name, data in bombs.items():
        assert len(data) < 5_000_000, name  # small on disk
        (folder / name).write_bytes(data)

    with watching() as watch:
        summary = ingest([folder], tmp_path / "index", max_chunks=1_000)

    assert summary.added == ["wombats.md"], summary
    failed = summary.failed
    assert set(failed) == set(bombs), failed
    assert "(a zip bomb?)" in failed["book.epub"], failed
    assert "over 16 times the file's size" in failed["sheet.xlsx"], failed
    assert "too many chunks" in failed["heading.md"], failed  # parsed, its paths cut short
    assert f"needed more than {CAP_MB} MB" in failed["sections.md"], failed
    assert watch.workers, "no parse worker was seen: the files were parsed in this process"
    assert max(watch.workers.values()) >> 20 <= CAP_MB, watch.workers
    grown = (watch.peak - watch.baseline) >> 20
    assert grown <= PARENT_GROWTH_MB, f"the ingesting process grew by {grown} MB"
    hits = search(SearchRequest(query="wombats grass", index_dir=tmp_path / "index", k=3))
    assert hits and hits[0].chunk.source == "wombats.md"


def test_a_question_is_answered_while_a_bomb_is_parsed(
    tmp_path: Path, capped: None, handbook_index: Path
) -> None:
    """The ingest runs on a thread (as the served indexer's job does); the question, asked
    once the worker is deep in the bomb, is answered before the bomb's parse is over."""
    warm_up(tmp_path)
    folder = tmp_path / "bomb"
    folder.mkdir()
    (folder / "sections.md").write_bytes(sections_bomb(1_500_000))
    outcome: dict[str, Any] = {}

    def run_ingest() -> None:
        outcome["summary"] = ingest([folder], tmp_path / "index")

    with watching() as watch:
        job = threading.Thread(target=run_ingest)
        job.start()
        deadline = time.monotonic() + 60
        while not watch.busy_worker(CAP_MB // 4) and job.is_alive():
            assert time.monotonic() < deadline, "the bomb never reached a parse worker"
            time.sleep(0.01)
        assert job.is_alive(), outcome  # still parsing the bomb
        asked = time.monotonic()
        hits = search(SearchRequest(query="rotate keys", index_dir=handbook_index, k=3))
        answered = time.monotonic() - asked
        still_parsing = job.is_alive()
        job.join(timeout=120)
    assert hits and hits[0].chunk.source == "keys.md", hits
    assert still_parsing, f"the bomb's parse was over before the answer came ({answered:.2f} s)"
    assert f"needed more than {CAP_MB} MB" in outcome["summary"].failed["sections.md"], outcome
    assert max(watch.workers.values()) >> 20 <= CAP_MB, watch.workers
