"""How DOCX parsing time grows with a small file of many paragraphs (issue 29's DOCX bomb:
an 82 KB file of 250,000 paragraphs took minutes).

Each size is a DOCX of N one-word paragraphs (or N identical headings), written straight into
document.xml so building it costs nothing; the parse is `footnote.ingest.parsers.office`'s,
timed alone (median of --repeat). Linear parsing shows as a time per 1,000 paragraphs that
stays about the same as N doubles.

    nice -n 10 .venv/bin/python benchmarks/office_parse.py [--sizes 20000 40000 80000] [--json]
"""

from __future__ import annotations

import argparse
import io
import json
import statistics
import sys
import time
import zipfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

PARAGRAPH = b"<w:p><w:r><w:t>word</w:t></w:r></w:p>"
HEADING = b'<w:p><w:pPr><w:pStyle w:val="Heading1"/></w:pPr><w:r><w:t>Same</w:t></w:r></w:p>'


def bomb(count: int, element: bytes) -> bytes:
    """A DOCX whose body holds `count` copies of `element`."""
    import docx

    blank = io.BytesIO()
    docx.Document().save(blank)
    source = zipfile.ZipFile(io.BytesIO(blank.getvalue()))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as target:
        for item in source.infolist():
            data = source.read(item.filename)
            if item.filename == "word/document.xml":
                data = data.replace(b"<w:body>", b"<w:body>" + element * count, 1)
            target.writestr(item, data)
    return out.getvalue()


def measure(sizes: list[int], repeat: int) -> list[dict[str, Any]]:
    from footnote.ingest.parsers.office import parse_docx

    rows = []
    for kind, element in (("paragraphs", PARAGRAPH), ("headings", HEADING)):
        for count in sizes:
            data = bomb(count, element)
            times = []
            for _ in range(repeat):
                started = time.perf_counter()
                parse_docx(data, Path("bomb.docx"), "bomb.docx")
                times.append(time.perf_counter() - started)
            seconds = statistics.median(times)
            rows.append(
                {
                    "kind": kind,
                    "count": count,
                    "file_bytes": len(data),
                    "seconds": round(seconds, 3),
                    "ms_per_1000": round(seconds * 1e6 / count, 2),
                }
            )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[20_000, 40_000, 80_000])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rows = measure(args.sizes, args.repeat)
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    for row in rows:
        print(
            f"{row['kind']:>10} {row['count']:>8,} ({row['file_bytes'] / 1000:.0f} KB): "
            f"{row['seconds']:.2f} s, {row['ms_per_1000']:.1f} ms per 1,000"
        )


if __name__ == "__main__":
    main()
