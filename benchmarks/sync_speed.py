"""How long `footnote sync` takes, as a whole process, against a full ingest.

The corpus is the 40 Python-docs pages of benchmarks/ingest_speed.py (the first 40 of
Debian `python3-doc`'s library/ by name). Three runs of the `footnote` command, each timed
from start to exit (interpreter start, imports, model load, reading the index included):

    full      `footnote ingest DIR` into a fresh index: the sources are remembered
    unchanged `footnote sync` with nothing changed
    one       `footnote sync` after one page gained a paragraph

    .venv/bin/python benchmarks/sync_speed.py [--docs DIR] [--limit N] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DOCS = Path("/usr/share/doc/python3.11/html/library")


def footnote(*args: str) -> tuple[float, float, dict[str, Any]]:
    """Run `footnote ARGS --json --quiet`; its wall seconds, CPU seconds and summary."""
    script = Path(sys.executable).with_name("footnote")
    command = [str(script) if script.exists() else "footnote", *args, "--json", "--quiet"]
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if done.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(command)} failed:\n{done.stderr[-2000:]}")
    return wall, cpu, json.loads(done.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--docs", type=Path, default=DEFAULT_DOCS)
    parser.add_argument("--limit", type=int, default=40)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    pages = sorted(p for p in args.docs.rglob("*.html") if p.is_file())[: args.limit]
    if len(pages) < args.limit:
        raise SystemExit(f"{args.docs}: fewer than {args.limit} pages (install python3-doc)")
    with tempfile.TemporaryDirectory() as tmp:
        corpus, index = Path(tmp) / "corpus", Path(tmp) / "index"
        corpus.mkdir()
        for page in pages:
            target = corpus / page.relative_to(args.docs)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(page, target)
        rows: dict[str, dict[str, Any]] = {}
        for name, run in (
            ("full", lambda: footnote("ingest", str(corpus), "--index", str(index))),
            ("unchanged", lambda: footnote("sync", "--index", str(index))),
            ("one", lambda: footnote("sync", "--index", str(index))),
        ):
            if name == "one":
                target = corpus / pages[0].relative_to(args.docs)
                text = target.read_text(encoding="utf-8")
                target.write_text(
                    text.replace("</body>", "<p>One more paragraph.</p></body>"), "utf-8"
                )
            wall, cpu, summary = run()
            rows[name] = {
                "wall_s": round(wall, 2),
                "cpu_s": round(cpu, 2),
                "chunks": summary["chunks"],
                "embedded_chunks": summary["embedded_chunks"],
                "added": summary["added"],
                "updated": summary["updated"],
            }
    full = rows["full"]["wall_s"]
    for row in rows.values():
        row["x_faster_than_full"] = round(full / row["wall_s"], 1)
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    print("| run | wall s | CPU s | chunks embedded / total | × faster than full |")
    print("|---|---|---|---|---|")
    for name, row in rows.items():
        print(
            f"| {name} | {row['wall_s']} | {row['cpu_s']} | "
            f"{row['embedded_chunks']} / {row['chunks']} | {row['x_faster_than_full']} |"
        )


if __name__ == "__main__":
    main()
