"""`footnote add`, `remove`, `sources` and `sync [--watch | --permissions-only | --every D]`:
keep an index in step with its folders, files and sites. Every command prints what changed
and why (`--json` for scripts). `serve --sync-every` takes its schedule from here too."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections.abc import Callable, Iterator
from typing import Any

from footnote.cli.options import add_index_option

EXAMPLES = """examples:
  footnote add docs/ handbook.pdf --index .footnote/index --access engineering
  footnote add https://example.com/docs/ --crawl --max-pages 200 --index .footnote/index
  footnote add git+file:///srv/repo --access engineering --index .footnote/index
  footnote add git+https://github.com/org/handbook.git --index .footnote/index
  GITHUB_TOKEN=... footnote add github://org/repo --index .footnote/index
  GITLAB_TOKEN=... footnote add gitlab+https://gitlab.example/group/project --index .footnote/index
  footnote add mediawiki+https://wiki.example/w/api.php --index .footnote/index
  FOOTNOTE_CONFLUENCE_TOKEN=... footnote add 'confluence+https://acme.atlassian.net/wiki?space=ENG'
  FOOTNOTE_JIRA_TOKEN=... footnote add 'jira+https://acme.atlassian.net?project=OPS'
  FOOTNOTE_SLACK_TOKEN=xoxb-... footnote add slack://acme --index .footnote/index
  FOOTNOTE_GDRIVE_TOKEN=... footnote add gdrive://1AbCdEfGhIjKlMnOp --index .footnote/index
  footnote sources --index .footnote/index --json
  footnote remove 'drafts/*' --index .footnote/index
  footnote sync --index .footnote/index --watch
"""


def register(sub: Any) -> None:
    """`footnote add`, `remove`, `sources` and `sync`."""
    _register_add(sub)
    _register_remove(sub)
    _register_sources(sub)
    _register_sync(sub)


_FORMAT = argparse.RawDescriptionHelpFormatter


def _common(p: argparse.ArgumentParser, *, writes: bool = True) -> None:
    """The options every corpus command takes; `writes`: also those of commands that ingest."""
    add_index_option(p)
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    if writes:
        p.add_argument(
            "--embeddings",
            default="",
            metavar="PROVIDER:MODEL",
            help="must match the index; empty = offline MiniLM",
        )
        p.add_argument(
            "--max-bytes", type=int, default=20_000_000, help="per document: refuse larger ones"
        )
        p.add_argument(
            "--max-chunks",
            type=int,
            default=20_000,
            help="per document: refuse ones giving more chunks",
        )
        p.add_argument(
            "--max-seconds",
            type=float,
            default=300.0,
            help="per document: parse, chunk and embed within this (0: no limit)",
        )
        p.add_argument(
            "--allow-private",
            action="store_true",
            help="let URL sources reach loopback, private and link-local addresses "
            "(remembered with a source `add` adds; `sources` shows it)",
        )
        p.add_argument("--quiet", action="store_true", help="no progress output")
        p.add_argument(
            "--rebuild",
            action="store_true",
            help="re-read and re-embed every remembered source, reusing nothing of the "
            "live version (the way back from a damaged index, which is otherwise refused)",
        )


def _register_add(sub: Any) -> None:
    p = sub.add_parser(
        "add",
        help="add or update sources (folders, files, URLs, sites, git repositories, GitHub "
        "and GitLab issues, wikis, Confluence, Jira, Slack, Google Drive) and index what "
        "they give",
        description="Add these sources to the index, or update how they are read, and index "
        "what they give. Documents of other sources are never touched. A git repository is "
        "git+file:///ABSOLUTE/PATH (read in place) or a clone URL, git+https://HOST/PATH or "
        "git+ssh://HOST/PATH (fetched into a private cache beside the index): its tracked "
        "files at HEAD of the default branch, cited by file and line at the commit; `sync` "
        "reads only the files changed since. github://OWNER/REPO reads its issues and pull "
        "requests with their comments (token from $GITHUB_TOKEN; readers from the "
        "repository's collaborators and teams). gitlab://GROUP/PROJECT (gitlab.com) or "
        "gitlab+https://HOST/GROUP/PROJECT reads a project's issues and merge requests with "
        "their notes ($GITLAB_TOKEN; readers from its members with Reporter access). "
        "mediawiki+https://HOST/PATH/api.php reads a "
        "wiki's pages (a bot password from $FOOTNOTE_MEDIAWIKI_USER and _PASSWORD, or "
        "none), confluence+https://HOST/wiki?space=KEY a space's pages, "
        "jira+https://HOST?project=KEY a project's issues ($FOOTNOTE_CONFLUENCE_TOKEN, "
        "$FOOTNOTE_JIRA_TOKEN), slack://WORKSPACE the channels its bot is in "
        "($FOOTNOTE_SLACK_TOKEN), gdrive://FOLDER_ID a Google Drive folder and its "
        "subfolders, gdrive://shared-drive/DRIVE_ID a shared drive (Google Docs, text, "
        "Markdown, HTML and PDF files; $FOOTNOTE_GDRIVE_CREDENTIALS, a service account's key "
        "file, or $FOOTNOTE_GDRIVE_TOKEN; readers from each file's sharing); "
        "mediawiki+http://, confluence+http:// and jira+http:// "
        "only on the operator's own network or loopback, gitlab+http:// on loopback, with "
        "--allow-private. These seven take their readers from the source, not "
        "--access, and every sync reads them again. See docs/connectors.md.",
        epilog=EXAMPLES,
        formatter_class=_FORMAT,
    )
    p.add_argument("paths", nargs="+", metavar="PATH_OR_URL")
    p.add_argument(
        "--access",
        default="",
        metavar="GROUPS",
        help="comma-separated groups for documents that state none (a git repository's "
        "files all get these: git has no per-file permissions)",
    )
    p.add_argument(
        "--include",
        action="append",
        default=[],
        metavar="GLOB",
        help="only files whose path under the folder matches (repeatable)",
    )
    p.add_argument(
        "--exclude",
        action="append",
        default=[],
        metavar="GLOB",
        help="leave out files whose path under the folder matches (repeatable)",
    )
    p.add_argument(
        "--follow-symlinks",
        action="store_true",
        help="follow symlinks that stay inside the sources",
    )
    p.add_argument(
        "--crawl",
        action="store_true",
        help="a URL is the start of a site: follow its links and sitemap",
    )
    p.add_argument("--max-depth", type=int, default=3, help="crawl: link depth (default 3)")
    p.add_argument("--max-pages", type=int, default=100, help="crawl: pages (default 100)")
    p.add_argument("--any-host", action="store_true", help="crawl: follow links to other hosts")
    _common(p)
    p.set_defaults(func=cmd_add)


def _register_remove(sub: Any) -> None:
    p = sub.add_parser(
        "remove",
        help="remove documents (by name or glob) or whole sources from the index",
        description="Remove documents and their chunks. SOURCE is a document name, a glob "
        "on names, or a source's path or URL (the source is then forgotten). A document "
        "removed from a folder that stays is excluded from later syncs. Exit status 1 when "
        "a SOURCE_OR_GLOB matched nothing (it is named; the others are still removed).",
        epilog=EXAMPLES,
        formatter_class=_FORMAT,
    )
    p.add_argument("patterns", nargs="+", metavar="SOURCE_OR_GLOB")
    _common(p)
    p.set_defaults(func=cmd_remove)


def _register_sources(sub: Any) -> None:
    p = sub.add_parser(
        "sources",
        help="list the index's sources and documents",
        description="List each source (how it was added) and each document with chunks, "
        "size, last ingested, access, and any failure with its reason.",
        epilog=EXAMPLES,
        formatter_class=_FORMAT,
    )
    _common(p, writes=False)
    p.set_defaults(func=cmd_sources)


def _register_sync(sub: Any) -> None:
    p = sub.add_parser(
        "sync",
        help="read every remembered source again and bring the index in step",
        description="New documents added, changed ones updated, those gone from a source "
        "removed; nothing outside the sources touched. --watch keeps doing it as files change; "
        "--permissions-only re-reads only who may read each connector document (docs/sync.md); "
        "--every and --permissions-every run them on a schedule until Ctrl-C.",
        epilog=EXAMPLES,
        formatter_class=_FORMAT,
    )
    p.add_argument("--watch", action="store_true", help="sync again whenever a source changes")
    p.add_argument("--debounce", type=float, default=0.5, help="--watch: wait this long (s)")
    p.add_argument(
        "--permissions-only",
        action="store_true",
        help="only ask connector sources who reads each indexed document now and publish "
        "the changed access: no content read, nothing embedded",
    )
    p.add_argument(
        "--every",
        type=duration,
        metavar="DURATION",
        help="sync again every DURATION (30s, 15m, 1h) until Ctrl-C, a line per run",
    )
    p.add_argument(
        "--permissions-every",
        type=duration,
        metavar="DURATION",
        help="a permission-only sync every DURATION (with or without --every)",
    )
    _common(p)
    p.set_defaults(func=cmd_sync)


def _options(args: argparse.Namespace) -> dict[str, Any]:
    from footnote.progress import ProgressPrinter

    return {
        "embeddings": args.embeddings,
        "max_bytes": args.max_bytes,
        "max_chunks": args.max_chunks,
        "max_seconds": args.max_seconds,
        # Not given: each URL source's remembered setting (`add --allow-private`) decides.
        "allow_private": True if args.allow_private else None,
        "progress": ProgressPrinter(args.quiet),
        "rebuild": args.rebuild,
    }


def _report(args: argparse.Namespace, run: Callable[[], Any]) -> int:
    from footnote.store.types import IndexError_

    try:
        summary = run()
    except (IndexError_, ValueError) as exc:
        from footnote.cli.conventions import index_status

        print(f"footnote: {exc}", file=sys.stderr)
        return index_status(exc)
    print_summary(summary, args.index, as_json=args.json)
    return 1 if summary.failed or summary.restricted else 0


def print_summary(summary: Any, index: str, *, as_json: bool) -> None:
    """What changed and why: one line of counts, then a line per change with its reason."""
    result = summary.to_dict()
    if as_json:
        print(json.dumps(result, indent=2), flush=True)
        return
    print(
        f"{index}: {result['added']} added, {result['updated']} updated, "
        f"{result['unchanged']} unchanged, {result['deleted']} deleted, "
        f"{result['failed']} failed, {result['skipped']} skipped; {summary.chunks} chunks "
        f"({summary.embedded_chunks} embedded)",
        flush=True,
    )
    for source in summary.added:
        print(f"  added: {source}: new in its source")
    for source in summary.updated:
        print(f"  updated: {source}: its content changed")
    for item in result["deletions"]:
        print(f"  deleted: {item['source']}: {item['reason']}")
    for error in result["errors"]:
        print(f"  failed: {error['source']}: {error['error']}")
    for item in result["restrictions"]:
        print(f"  admins only: {item['source']}: {item['reason']}")
    from footnote.cli.console import skipped_lines

    for line in skipped_lines(summary.skipped):  # crawl pages not taken, with the reason
        print(f"  skipped: {line}")
    sys.stdout.flush()


def cmd_add(args: argparse.Namespace) -> int:
    from footnote.ingest import corpus

    crawl = None
    if args.crawl:
        crawl = {
            "max_depth": args.max_depth,
            "max_pages": args.max_pages,
            "same_host": not args.any_host,
        }
    return _report(
        args,
        lambda: corpus.add(
            args.index,
            args.paths,
            access=[g.strip() for g in args.access.split(",") if g.strip()] or None,
            include=args.include,
            exclude=args.exclude,
            follow_symlinks=args.follow_symlinks,
            crawl=crawl,
            **_options(args),
        ),
    )


def cmd_remove(args: argparse.Namespace) -> int:
    """Like `rm`: what matched is removed; a pattern that matched nothing is named on stderr
    and makes the exit status 1."""
    from footnote.ingest import corpus
    from footnote.store.redaction import redact

    missing = corpus.unmatched(args.index, args.patterns)
    found = [p for p in args.patterns if p not in missing]
    for pattern in missing:
        print(
            f"footnote: nothing in {redact(args.index)} matches {pattern!r} "
            "(`footnote sources` lists its documents and sources)",
            file=sys.stderr,
        )
    if not found:
        return 1
    status = _report(args, lambda: corpus.remove(args.index, found, **_options(args)))
    return status or (1 if missing else 0)


def cmd_sources(args: argparse.Namespace) -> int:
    from footnote.ingest import corpus

    listing = corpus.sources(args.index)
    if args.json:
        print(json.dumps(listing, indent=2))
        return 0
    print(f"{args.index}: {len(listing['sources'])} sources, {len(listing['documents'])} documents")
    under: dict[str | None, list[dict[str, Any]]] = {}
    for doc in listing["documents"]:
        under.setdefault(doc["root"], []).append(doc)
    known = {root["id"] for root in listing["sources"]}
    for root in listing["sources"]:
        extra = ", ".join(
            f"{k} {', '.join(v)}"
            for k, v in (
                ("access", root["access"]),
                ("include", root["include"]),
                ("exclude", root["exclude"]),
            )
            if v
        )
        if root.get("checkpoint"):
            extra += (", " if extra else "") + _checkpoint_text(root["checkpoint"])
        if root.get("allow_private"):
            extra += (", " if extra else "") + "private addresses allowed (--allow-private)"
        extra = f", {extra}" if extra else ""
        print(f"  {root['kind']} {root['id']} ({root['documents']} documents{extra})")
        for doc in under.get(root["id"], []):
            print(_document_line(doc))
    orphans = [doc for root, docs in under.items() if root not in known for doc in docs]
    if orphans:
        print("  documents of no recorded source (indexed before sources were remembered)")
        for doc in orphans:
            print(_document_line(doc))
    for failure in listing["failures"]:
        print(f"  failed: {failure['source']}: {failure['reason']}")
    return 0


def _checkpoint_text(checkpoint: dict[str, Any]) -> str:
    """Where a connector source stood at its last sync: `commit 1a2b3c4d5e6f, synced ...`
    for a repository, `updated 2026-11-02T09:10:00Z, synced ...` for an issue tracker."""
    cursor = str(checkpoint.get("cursor") or "")
    where = (
        f"commit {cursor[:12]}"
        if "commit" in (checkpoint.get("detail") or {})
        else f"updated {cursor}"
    )
    return f"{where}, synced {checkpoint.get('reached_at') or 'unknown'}"


def _document_line(doc: dict[str, Any]) -> str:
    access = ",".join(doc["access"] or []) or "admins only"
    line = (
        f"    {doc['source']}: {doc['chunks']} chunks, {doc['size']} bytes, "
        f"ingested {doc['ingested_at'] or 'before sources were recorded'}, access {access}"
    )
    if doc["restricted"]:
        line += f" (admins only: {doc['restricted']})"
    return line


def cmd_sync(args: argparse.Namespace) -> int:
    from footnote.ingest import corpus
    from footnote.ingest.audit import local_operator
    from footnote.ingest.sync_schedule import audited_run, record_run
    from footnote.store.types import IndexError_

    if args.every or args.permissions_every:
        return _scheduled_sync(args)
    if args.permissions_only:
        if args.watch or args.rebuild:
            print("footnote: --permissions-only takes no --watch or --rebuild", file=sys.stderr)
            return 2
        return _report_permissions(args)
    who = local_operator()
    status = _report(
        args,
        lambda: audited_run(
            args.index, "sync", who, lambda: corpus.sync(args.index, **_options(args))
        ),
    )
    if not args.watch or status == 2:
        return status

    def watching(paths: list[str]) -> None:
        print(
            f"footnote: watching {len(paths)} source(s) for changes ({', '.join(paths)}); "
            "Ctrl-C stops",
            file=sys.stderr,
            flush=True,
        )

    options = {**_options(args), "rebuild": False}  # rebuilt once at most, by the first sync
    try:
        for summary in corpus.watch(
            args.index, debounce=args.debounce, on_start=watching, **options
        ):
            record_run(args.index, "sync", who, summary)
            print_summary(summary, args.index, as_json=args.json)
    except KeyboardInterrupt:
        return 0
    except (IndexError_, ValueError) as exc:  # damaged while watched: refused, the watch ends
        record_run(args.index, "sync", who, None, exc)
        print(f"footnote: {exc}", file=sys.stderr)
        return 2
    return status


def _report_permissions(args: argparse.Namespace) -> int:
    """`sync --permissions-only`: the counts, then a line per document whose access changed
    or that only admins may see; exit 1 when a source failed or a document is admins only."""
    from footnote.ingest import corpus
    from footnote.ingest.audit import local_operator
    from footnote.ingest.sync_schedule import audited_run
    from footnote.store.types import IndexError_

    def run() -> Any:
        allow = True if args.allow_private else None
        return corpus.sync_permissions(args.index, allow_private=allow, embeddings=args.embeddings)

    try:
        summary = audited_run(args.index, "permissions", local_operator(), run)
    except (IndexError_, ValueError) as exc:
        from footnote.cli.conventions import index_status

        print(f"footnote: {exc}", file=sys.stderr)
        return index_status(exc)
    result = summary.to_dict()
    if args.json:
        print(json.dumps(result, indent=2), flush=True)
    else:
        print(
            f"{args.index}: permissions of {result['checked']} documents checked "
            f"({result['sources']} connector sources), {result['access_changed']} access "
            f"changed, {result['restricted']} admins only, {result['failed']} failed; "
            f"{result['embedded_texts']} embedded",
            flush=True,
        )
        for item in result["changes"]:
            print(f"  access: {item['source']}: {','.join(item['access'] or []) or 'admins only'}")
        for item in result["restrictions"]:
            print(f"  admins only: {item['source']}: {item['reason']}")
        for error in result["errors"]:
            print(f"  failed: {error['source']}: {error['error']}")
    return 1 if summary.failed or summary.restricted else 0


def _scheduled_sync(args: argparse.Namespace) -> int:
    """`sync --every D [--permissions-every D]`: a line per run (JSON with --json) until
    Ctrl-C, which ends it with status 0; a failed run is a line and the schedule goes on."""
    from footnote.ingest.sync_schedule import run_line, run_schedule, sync_runner, timers_for

    if args.watch or args.rebuild:
        print("footnote: a schedule cannot --watch or --rebuild", file=sys.stderr)
        return 2
    every, permissions = args.every, args.permissions_every
    if args.permissions_only:  # --permissions-only --every D: only permission syncs
        every, permissions = None, permissions or every
    options = {**_options(args), "rebuild": False}
    options["progress"] = None  # a line per run, not a progress bar per run

    def report(kind: Any, summary: Any, error: Exception | None, wait: float) -> None:
        if args.json:
            done = {"run": kind, "next_s": wait}
            done.update({"error": str(error)} if error else summary.to_dict())
            print(json.dumps(done), flush=True)
        else:
            print(run_line(kind, summary, error, wait), flush=True)

    print(
        f"footnote: syncing {args.index} on a schedule; Ctrl-C stops", file=sys.stderr, flush=True
    )
    try:
        run_schedule(
            timers_for(every, permissions), sync_runner(args.index, "schedule", **options), report
        )
    except KeyboardInterrupt:
        return 0
    return 0


def duration(text: str) -> float:
    """An option's DURATION (`30s`, `15m`, `1h`, `1h30m`) in seconds; argparse's own error
    (status 2) for anything else."""
    from footnote.ingest.sync_schedule import parse_duration

    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_schedule_options(p: argparse.ArgumentParser) -> None:
    """`footnote serve --sync-every D [--permissions-every D]`: the served index synced on a
    schedule beside the server."""
    group = p.add_argument_group("syncing on a schedule (docs/sync.md)")
    group.add_argument(
        "--sync-every",
        type=duration,
        metavar="DURATION",
        help="a full sync of the served index every DURATION (30s, 15m, 1h), the first at start",
    )
    group.add_argument(
        "--permissions-every",
        type=duration,
        metavar="DURATION",
        help="a permission-only sync every DURATION: readers re-read, nothing embedded",
    )


@contextlib.contextmanager
def served_schedule(args: argparse.Namespace) -> Iterator[None]:
    """While `footnote serve` runs: the schedule its options ask for in a thread of this
    process (none when neither is given), each run a line here and an audit record by
    `schedule`; stopped, after the run in progress, when the server stops."""
    if args.sync_every is None and args.permissions_every is None:
        yield
        return
    import os

    from footnote.ingest.sync_schedule import ScheduleThread, served_runner, timers_for

    options = {  # as the served indexer's "Sync all" is run (graph.indexer.IndexerContext)
        "embeddings": os.environ.get("FOOTNOTE_EMBEDDINGS", "").strip(),
        "allow_private": os.environ.get("FOOTNOTE_ALLOW_PRIVATE_URLS") == "1",
    }
    timers = timers_for(args.sync_every, args.permissions_every)
    runner = served_runner(str(args.index), "schedule", **options)
    thread = ScheduleThread(timers, runner, lambda line: print(f"footnote: {line}", flush=True))
    thread.start()
    try:
        yield
    finally:
        thread.stop()
