"""The `footnote` command: ingest documents, search them, ask questions, evaluate, serve."""

from __future__ import annotations

import argparse
import gc
import os
import sys
from collections.abc import Callable
from types import ModuleType

from footnote.cli import (
    ask,
    audit,
    backup,
    cache,
    corpus,
    entity_graph,
    evaluate,
    feedback,
    ingest,
    keys,
    mcp,
    search,
    serve,
    settings,
)
from footnote.cli.conventions import finish, report

EPILOG = """\
examples:
  footnote ingest samples/handbook --index .footnote/handbook
  footnote search "How often do I have to change my API key?" --index .footnote/handbook
  footnote ask "How often do I have to change my API key?" --index .footnote/handbook
  footnote ask "..." --model openai:gpt-4.1-mini       # any init_chat_model string

The index directory defaults to $FOOTNOTE_INDEX, else .footnote/index. --index also takes
a PostgreSQL URL (pgvector), e.g. postgresql://user@host:5432/db?index=handbook.
"""


COMMANDS: tuple[ModuleType, ...] = (
    ingest,
    search,
    ask,  # and chat
    settings,
    serve,
    corpus,  # sources, sync, remove, ...
    cache,
    entity_graph,
    evaluate,
    feedback,
    mcp,
    keys,
    backup,  # and restore
    audit,
)
"""Every command's module, in the order `footnote --help` lists them; each declares its own
commands' options with `register(subparsers)`."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="footnote",
        description="Answer questions from your own documents, citing every claim.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in COMMANDS:
        module.register(subparsers)
    finish(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    try:
        args = build_parser().parse_args(argv)  # prints --help itself
    except BrokenPipeError:
        return _reader_left()
    handler: Callable[[argparse.Namespace], int] = args.func
    try:
        return handler(args)
    except BrokenPipeError:
        return _reader_left()
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        if args.debug:
            raise
        return report(exc)  # one line, not a traceback: see footnote/cli/conventions.py


def run() -> int:
    """The installed `footnote` command: `main`, then its objects frozen out of the garbage
    collector before the interpreter exits.

    At exit CPython sweeps everything a run left for reference cycles (the graph, pydantic's
    models, the index) before handing the memory back; on a cold `footnote ask` that sweep is
    0.2 to 0.4 s of the 3 s budget, for memory the process is about to lose anyway. Frozen,
    the objects are skipped. Only the command does this: a program that calls `main` (the
    tests do, many times over) keeps collecting what each call leaves."""
    status = main()
    gc.freeze()
    return status


def _reader_left() -> int:
    """The reader of our output went away (`footnote settings | head`): stop quietly, as
    `git log | head` does, instead of reporting the closed pipe as a failure. What is still
    buffered goes to /dev/null, so the interpreter's own flush at exit cannot fail again."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 141  # 128 + SIGPIPE, the status a shell reports for a reader that left


if __name__ == "__main__":
    raise SystemExit(run())
