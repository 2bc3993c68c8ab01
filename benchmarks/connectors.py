"""How long a connector source's full sync and its incremental sync take, and how much memory.

Two sources, each read by the `footnote` command as a whole process (interpreter start,
imports, model load and the index included), timed from start to exit, with its CPU time
and its peak resident memory (`os.wait4`: the largest of the command and the parse workers
it waited for):

    mediawiki  Debian's MediaWiki (SQLite, `php -S` on loopback, as tests/mediawiki_server.py
               sets it up) holding PAGES pages imported with maintenance/importDump.php, each
               a section of the Python documentation (Debian `python3-doc`), up to
               3,000 characters of its text as wikitext with its sub-headings
    git        a `git clone --no-local` of this checkout (its whole history), read in place

For each: `footnote add SOURCE` into a fresh index (the full sync), `footnote sync` with
nothing changed, then 10 changes (10 wiki pages edited through the API; 10 Markdown files
changed in one commit) and `footnote sync` (the incremental sync). Every run starts from a
fresh copy of the wiki or a fresh clone, a fresh index (so a fresh, cold embedding cache,
which lives beside the index) and a fresh $FOOTNOTE_STATE_DIR; what stays warm between runs
is only the operating system's file cache (the model's files, the Python packages). The two
sources' runs are interleaved, REPEAT of each (default 3); the table gives medians.

    nice -n 10 .venv/bin/python benchmarks/connectors.py [--pages N] [--repeat N] [--json]
        [--sources mediawiki,git] [--repo PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any
from xml.sax.saxutils import escape

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.mediawiki_server import WikiServer, WikiTemplate, _php, install  # noqa: E402

DEFAULT_DOCS = Path("/usr/share/doc/python3.11/html")
PAGE_CHARS = 3_000
CHANGES = 10
EDIT = "\n\n== Revised ==\nThis section was revised after the first sync, run {n}.\n"
TITLE_BANNED = str.maketrans({c: " " for c in "#<>[]|{}_"})


@dataclass
class Run:
    """One `footnote` command: wall and CPU seconds, peak RSS, and its summary."""

    wall_s: float
    cpu_s: float
    peak_mb: float
    chunks: int
    embedded_chunks: int
    embedded_texts: int
    added: int
    updated: int
    failed: int
    skipped: int


def footnote(env: dict[str, str], *args: str) -> Run:
    """Runs `footnote ARGS --json --quiet`; waits with wait4 for this child's own rusage."""
    script = Path(sys.executable).with_name("footnote")
    command = [str(script) if script.exists() else "footnote", *args, "--json", "--quiet"]
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        process = subprocess.Popen(command, stdout=out, stderr=err, env=env)
        _, status, usage = os.wait4(process.pid, 0)
        wall = time.perf_counter() - start
        process.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0), err.seek(0)
        if process.returncode not in (0, 1):  # 1: a document failed or is restricted
            raise SystemExit(f"{' '.join(command)}: {process.returncode}\n{err.read()[-3000:]!r}")
        summary = json.loads(out.read())
    return Run(
        wall_s=round(wall, 2),
        cpu_s=round(usage.ru_utime + usage.ru_stime, 2),
        peak_mb=round(usage.ru_maxrss / 1024, 1),  # Linux: kB
        chunks=summary["chunks"],
        embedded_chunks=summary["embedded_chunks"],
        embedded_texts=summary["embedded_texts"],
        added=summary["added"],
        updated=summary["updated"],
        failed=summary["failed"],
        skipped=summary["skipped"],
    )


def fresh_env(folder: Path) -> dict[str, str]:
    """The command's environment: its own state folder, no inherited Footnote index."""
    state = folder / "state"
    state.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("FOOTNOTE_")}
    return {**env, "FOOTNOTE_STATE_DIR": str(state), "TOKENIZERS_PARALLELISM": "false"}


# --- the wiki's pages -------------------------------------------------------------------


def _clean(text: str) -> str:
    return " ".join(text.replace("¶", " ").split())


def section_pages(html: Path) -> Iterator[tuple[str, str]]:
    """(title, wikitext) for each second-level section of one Python-docs page."""
    from bs4 import BeautifulSoup

    soup = BeautifulSoup(html.read_text(encoding="utf-8", errors="replace"), "html.parser")
    top = soup.find("h1")
    if top is None:
        return
    page = _clean(top.get_text())
    for heading in soup.find_all("h2"):
        section = heading.find_parent("section")
        if section is None:
            continue
        lines: list[str] = []
        for tag in section.find_all(["h3", "h4", "p", "pre", "dt"]):
            text = _clean(tag.get_text())
            if not text:
                continue
            if tag.name in ("h3", "h4"):
                marks = "=" * (3 if tag.name == "h3" else 4)
                text = f"{marks} {text} {marks}"
            lines.append(text)
            if sum(len(line) for line in lines) > PAGE_CHARS:
                break
        body = "\n\n".join(lines)[:PAGE_CHARS]
        title = _clean(f"{page} - {_clean(heading.get_text())}".translate(TITLE_BANNED))
        if len(body) >= 200:
            yield title[:200], body


def wiki_pages(docs: Path, count: int) -> list[tuple[str, str]]:
    """`count` pages of real text, unique titles, from the docs' sections in name order."""
    pages: dict[str, str] = {}
    for html in sorted(docs.rglob("*.html")):
        for title, body in section_pages(html):
            pages.setdefault(title, body)
            if len(pages) == count:
                return list(pages.items())
    raise SystemExit(f"{docs}: only {len(pages)} sections, fewer than {count} pages")


def write_dump(pages: list[tuple[str, str]], path: Path) -> None:
    """A MediaWiki XML export (format 0.11) of the pages, for importDump.php."""
    with path.open("w", encoding="utf-8") as out:
        out.write('<mediawiki xmlns="http://www.mediawiki.org/xml/export-0.11/" version="0.11">\n')
        for title, body in pages:
            out.write(
                f"<page><title>{escape(title)}</title><ns>0</ns><revision>"
                "<timestamp>2026-01-01T00:00:00Z</timestamp>"
                "<contributor><username>Admin</username></contributor>"
                "<model>wikitext</model><format>text/x-wiki</format>"
                f'<text xml:space="preserve">{escape(body)}</text></revision></page>\n'
            )
        out.write("</mediawiki>\n")


def prepare_wiki(folder: Path, pages: list[tuple[str, str]]) -> WikiTemplate:
    """The test suite's wiki installed once, with the pages imported into its template."""
    (folder / "template").mkdir(parents=True)
    template = install(folder / "template")
    dump = folder / "pages.xml"
    write_dump(pages, dump)
    _php(template, "importDump.php", "--no-updates", str(dump))
    return template


def wiki_run(
    template: WikiTemplate, folder: Path, pages: list[tuple[str, str]], n: int
) -> dict[str, Run]:
    """Full sync, unchanged sync, 10 pages edited, incremental sync, on a fresh copy."""
    env, index = fresh_env(folder), str(folder / "index")
    (folder / "wiki").mkdir()
    server = WikiServer(template, folder / "wiki").start()
    try:
        source = f"mediawiki+{server.api}"
        runs = {"full": footnote(env, "add", source, "--allow-private", "--index", index)}
        runs["unchanged"] = footnote(env, "sync", "--index", index)
        editor = server.session("Admin")
        try:
            for title, text in pages[:: max(1, len(pages) // CHANGES)][:CHANGES]:
                editor.edit(title, text + EDIT.format(n=n))
        finally:
            editor.close()
        runs["incremental"] = footnote(env, "sync", "--index", index)
    finally:
        server.stop()
    return runs


# --- the git repository -----------------------------------------------------------------


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(repo), "-c", "user.name=Bench", "-c", "user.email=bench@example.org",
         *args],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return done.stdout


def git_run(origin: Path, head: str, folder: Path, n: int) -> dict[str, Run]:
    """Full sync, unchanged sync, 10 Markdown files changed in a commit, incremental sync,
    on a fresh clone held at `head`, so every run reads the same commit."""
    env, index, repo = fresh_env(folder), str(folder / "index"), folder / "repo"
    subprocess.run(
        ["git", "clone", "--quiet", "--no-local", str(origin), str(repo)],
        check=True,
        capture_output=True,
    )
    git(repo, "reset", "--quiet", "--hard", head)
    source = f"git+file://{repo}"
    runs = {"full": footnote(env, "add", source, "--index", index)}
    runs["unchanged"] = footnote(env, "sync", "--index", index)
    markdown = sorted(git(repo, "ls-files", "*.md").split())
    changed = markdown[:: max(1, len(markdown) // CHANGES)][:CHANGES]
    for name in changed:
        with (repo / name).open("a", encoding="utf-8") as handle:
            handle.write(EDIT.format(n=n).replace("== Revised ==", "## Revised"))
    git(repo, "commit", "--quiet", "-am", f"Revise {len(changed)} pages")
    runs["incremental"] = footnote(env, "sync", "--index", index)
    return runs


def repo_size(repo: Path) -> dict[str, Any]:
    """What a clone of the repository holds: files at HEAD, their bytes, commits, HEAD."""
    sizes = [line.split()[3] for line in git(repo, "ls-tree", "-r", "-l", "HEAD").splitlines()]
    return {
        "files": len(sizes),
        "mb": round(sum(int(size) for size in sizes if size.isdigit()) / 1e6, 2),
        "commits": int(git(repo, "rev-list", "--count", "HEAD")),
        "head": git(repo, "rev-parse", "--short=12", "HEAD").strip(),
    }


# --- the table --------------------------------------------------------------------------


def medians(runs: list[dict[str, Run]]) -> dict[str, dict[str, float]]:
    """Per step, the median of each figure over the runs."""
    out: dict[str, dict[str, float]] = {}
    for step in runs[0]:
        rows = [asdict(run[step]) for run in runs]
        out[step] = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
    full = out["full"]["wall_s"]
    out["incremental"]["share_of_full"] = round(out["incremental"]["wall_s"] / full, 3)
    return out


def table(results: dict[str, Any]) -> str:
    lines = [
        "| source | step | wall s | CPU s | peak RSS MB | documents added / updated | "
        "chunks written / total | texts the model embedded |",
        "|---|---|---|---|---|---|---|---|",
    ]
    names = [name for name in ("mediawiki", "git") if name in results]
    for name in names:
        for step, row in results[name]["median"].items():
            lines.append(
                f"| {name} | {step} | {row['wall_s']:.1f} | {row['cpu_s']:.1f} | "
                f"{row['peak_mb']:.0f} | {row['added']:.0f} / {row['updated']:.0f} | "
                f"{row['embedded_chunks']:.0f} / {row['chunks']:.0f} | "
                f"{row['embedded_texts']:.0f} |"
            )
    for name in names:
        share = results[name]["median"]["incremental"]["share_of_full"]
        lines.append(f"\n{name}: incremental sync / full sync = {share:.1%} of the wall time")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--docs",
        type=Path,
        default=DEFAULT_DOCS,
        help="the HTML documentation the wiki's pages are cut from (default: python3-doc's)",
    )
    parser.add_argument("--pages", type=int, default=1_000, help="wiki pages (default 1000)")
    parser.add_argument(
        "--repeat", type=int, default=3, help="runs of each source, interleaved (default 3)"
    )
    parser.add_argument("--repo", type=Path, default=ROOT, help="default: this checkout")
    parser.add_argument("--sources", default="mediawiki,git", help="which to run, comma-separated")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args()
    names = [name for name in ("mediawiki", "git") if name in args.sources.split(",")]
    pages = wiki_pages(args.docs, args.pages) if "mediawiki" in names else []
    results: dict[str, Any] = {
        "machine": f"{os.cpu_count()} CPUs, {platform.python_version()}",
        "load_before": os.getloadavg()[0],
        "git_repository": repo_size(args.repo),
        "wiki_pages": len(pages),
        "wiki_mb": round(sum(len(b.encode()) for _, b in pages) / 1e6, 2),
    }
    runs: dict[str, list[dict[str, Run]]] = {name: [] for name in names}
    with tempfile.TemporaryDirectory() as tmp:
        template = prepare_wiki(Path(tmp) / "setup", pages) if "mediawiki" in names else None
        for n in range(args.repeat):
            for name in names:
                folder = Path(tmp) / f"{name}{n}"
                if template is not None and name == "mediawiki":
                    runs[name].append(wiki_run(template, folder, pages, n))
                else:
                    head = results["git_repository"]["head"]
                    runs[name].append(git_run(args.repo, head, folder, n))
                figures = {k: asdict(v) for k, v in runs[name][-1].items()}
                print(f"{name} run {n + 1}: {json.dumps(figures)}", file=sys.stderr, flush=True)
    results["load_after"] = os.getloadavg()[0]
    for name, done in runs.items():
        results[name] = {"runs": [{k: asdict(v) for k, v in r.items()} for r in done]}
        results[name]["median"] = medians(done)
    print(json.dumps(results, indent=2) if args.json else table(results))


if __name__ == "__main__":
    main()
