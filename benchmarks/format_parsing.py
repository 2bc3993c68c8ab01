"""How long the record and container formats take to parse, per file and per record.

    nice -n 10 .venv/bin/python benchmarks/format_parsing.py --rows 10000 --repeat 3

Builds one file of each format with its own library (tests/format_files.py makes the small
ones; here they are scaled up): a CSV and an XLSX of `--rows` rows, a JSON array and a JSONL
file of `--rows` records, an mbox of `--rows / 10` messages, an EPUB of 50 chapters, and, when
Tesseract is installed, one scanned A4-sized page for OCR. Prints the median parse time of
`--repeat` runs and the sections made, as JSON. Parsing only: chunking and embedding are
what benchmarks/ingest_speed.py measures.
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import json
import mailbox
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from footnote.ingest.parsers import parse_file  # noqa: E402
from tests.format_files import epub_bytes, message, text_image  # noqa: E402


def build(folder: Path, rows: int) -> dict[str, Path]:
    import openpyxl

    files: dict[str, Path] = {}
    path = files["csv"] = folder / "rows.csv"
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["id", "name", "city", "amount", "note"])
        for i in range(rows):
            writer.writerow([i, f"name {i}", f"city {i % 97}", i * 3, f"a note about row {i}"])
    book = openpyxl.Workbook(write_only=True)
    sheet = book.create_sheet("Data")
    sheet.append(["id", "name", "city", "amount", "note"])
    for i in range(rows):
        sheet.append([i, f"name {i}", f"city {i % 97}", i * 3, f"a note about row {i}"])
    book.save(files.setdefault("xlsx", folder / "rows.xlsx"))
    records = [{"id": i, "name": f"name {i}", "tags": ["a", "b"], "at": {"city": i % 97}}
               for i in range(rows)]  # fmt: skip
    files["json"] = folder / "records.json"
    files["json"].write_text(json.dumps({"items": records}))
    files["jsonl"] = folder / "records.jsonl"
    files["jsonl"].write_text("".join(json.dumps(r) + "\n" for r in records))
    files["mbox"] = folder / "mail.mbox"
    box = mailbox.mbox(files["mbox"])
    when = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    for i in range(max(1, rows // 10)):
        box.add(message(f"p{i % 20}@x.example", f"topic {i % 50}", f"body {i} " * 20, when))
    box.flush()
    box.close()
    chapters = [(f"c{i}.xhtml", f"Chapter {i}", "<p>text</p>" * 200) for i in range(50)]
    files["epub"] = folder / "book.epub"
    files["epub"].write_bytes(epub_bytes(chapters))
    if shutil.which("tesseract"):
        files["ocr page"] = folder / "page.png"
        lines = [f"Line {i}: the quick brown fox jumps over the lazy dog." for i in range(40)]
        text_image(lines).save(files["ocr page"])  # type: ignore[attr-defined]
    return files


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    results = {}
    with tempfile.TemporaryDirectory() as work:
        for kind, path in build(Path(work), args.rows).items():
            times, sections = [], 0
            for _ in range(args.repeat):
                started = time.perf_counter()
                sections = len(parse_file(path, path.name).sections)
                times.append(time.perf_counter() - started)
            median = statistics.median(times)
            results[kind] = {
                "bytes": path.stat().st_size,
                "sections": sections,
                "seconds": round(median, 3),
                "us_per_section": round(median / max(sections, 1) * 1e6, 1),
            }
    print(json.dumps({"rows": args.rows, "repeat": args.repeat, "results": results}, indent=2))


if __name__ == "__main__":
    main()
