"""How much Sphinx page chrome leaks into parsed HTML sections.

Parses every HTML page under a documentation tree (by default the Debian
`python3-doc` build of the Python docs) with `ingest.parsers.parse_file` and
counts sections whose text or heading path contains navigation boilerplate:
the related bar, sidebar boxes, footer, permalink pilcrows. The goal is zero.

    .venv/bin/python benchmarks/html_boilerplate.py [DIR] [--json]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from footnote.ingest.documents import ParseError  # noqa: E402
from footnote.ingest.parsers import parse_file  # noqa: E402

DEFAULT_DIR = Path("/usr/share/doc/python3.11/html")
SKIP_NAMES = ("genindex", "search.html", "py-modindex.html")
WAIT_SECONDS = 600

TEXT_MARKERS = {
    "permalink ¶": re.compile("¶"),
    "related bar": re.compile(r"index modules \|"),
    "related bar next/previous": re.compile(r"next \| previous \|"),
    "related bar heading": re.compile(r"Navigation index"),
    "breadcrumb": re.compile(r"Documentation »"),
    "search box": re.compile(r"Quick search"),
    "report a bug": re.compile(r"Report a Bug"),
    "show source": re.compile(r"Show Source"),
    "footer copyright": re.compile(r"© Copyright"),
    "footer last updated": re.compile(r"Last updated on [A-Z][a-z]+ \d"),
    "footer found a bug": re.compile(r"Found a bug\?"),
    "footer sphinx": re.compile(r"Created using Sphinx"),
    "footer donate": re.compile(r"Please donate\."),
    "theme switcher": re.compile(r"Theme Auto Light Dark"),
}
"""Label -> pattern only the Sphinx theme's chrome produces (matched on collapsed text).

`Last updated on: <date>` (with a colon) is content on download.html; the footer
has no colon.
"""

HEADING_MARKERS = frozenset(
    {"Navigation", "Table of Contents", "This Page", "Previous topic", "Next topic",
     "Quick search", "Contents"}
)  # fmt: skip
"""Sidebar and related-bar headings: a section under one of them is chrome."""


@dataclass
class Report:
    directory: str
    files_parsed: int = 0
    sections: int = 0
    parse_errors: int = 0
    nav_sections: int = 0
    seconds: float = 0.0
    markers: Counter[str] = field(default_factory=Counter)
    errors: list[str] = field(default_factory=list)
    examples: list[str] = field(default_factory=list)


def wait_for(directory: Path, seconds: int) -> None:
    """The docs package may still be installing; give it a while before failing."""
    deadline = time.monotonic() + seconds
    while not directory.is_dir():
        if time.monotonic() > deadline:
            raise SystemExit(f"{directory} did not appear within {seconds} s")
        print(f"waiting for {directory} ...", file=sys.stderr)
        time.sleep(10)


def html_files(directory: Path) -> list[Path]:
    return sorted(
        path
        for path in directory.rglob("*.htm*")
        if path.suffix in (".html", ".htm") and not path.name.startswith(SKIP_NAMES)
    )


def nav_markers(headings: list[str], text: str) -> list[str]:
    flat = " ".join(" ".join([*headings, text]).split())
    found = [label for label, marker in TEXT_MARKERS.items() if marker.search(flat)]
    found += [f"heading {h!r}" for h in headings if h in HEADING_MARKERS]
    return found


def run(directory: Path) -> Report:
    report = Report(directory=str(directory))
    started = time.perf_counter()
    for path in html_files(directory):
        source = path.relative_to(directory).as_posix()
        try:
            doc = parse_file(path, source)
        except ParseError as exc:
            report.parse_errors += 1
            report.errors.append(f"{source}: {exc}")
            continue
        report.files_parsed += 1
        report.sections += len(doc.sections)
        for section in doc.sections:
            found = nav_markers(section.headings, section.text)
            if found:
                report.nav_sections += 1
                report.markers.update(found)
                if len(report.examples) < 20:
                    report.examples.append(f"{section.url}: {', '.join(found)}")
    report.seconds = round(time.perf_counter() - started, 2)
    return report


def markdown(report: Report) -> str:
    rows = [
        ("directory", report.directory),
        ("files parsed", report.files_parsed),
        ("sections", report.sections),
        ("parse errors", report.parse_errors),
        ("sections with nav text", report.nav_sections),
        ("seconds", report.seconds),
    ]
    lines = ["| metric | value |", "| --- | --- |"]
    lines += [f"| {name} | {value} |" for name, value in rows]
    for label, count in report.markers.most_common():
        lines.append(f"| marker: {label} | {count} |")
    for example in report.examples:
        lines.append(f"\n- nav text in {example}")
    for error in report.errors:
        lines.append(f"\n- error: {error}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("directory", nargs="?", type=Path, default=DEFAULT_DIR)
    parser.add_argument("--json", action="store_true", help="print JSON instead of Markdown")
    parser.add_argument("--wait", type=int, default=WAIT_SECONDS, help="seconds to wait for DIR")
    args = parser.parse_args(argv)
    wait_for(args.directory, args.wait)
    report = run(args.directory)
    if args.json:
        print(json.dumps(asdict(report), indent=2, ensure_ascii=False))
    else:
        print(markdown(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
