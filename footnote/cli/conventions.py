"""What every `footnote` subcommand has: examples in its `--help`, `--debug`, and errors as one
line with an exit status instead of a traceback.

Exit statuses: 2 for a problem the user fixes by changing the command or the set-up (an index,
a model string, a missing provider package), 3 for a provider's server that could not be
reached or failed, 1 for anything unexpected (`--debug` shows its traceback).
"""

from __future__ import annotations

import argparse
import sys

EXAMPLES = {
    "ingest": """\
  footnote ingest samples/handbook --index .footnote/handbook
  footnote ingest docs/ --embeddings openai:text-embedding-3-small   # remembered for search/ask
  footnote ingest docs/ --default-access engineering --json --quiet""",
    "search": """\
  footnote search "How often do I have to change my API key?" --index .footnote/handbook
  footnote search "key rotation" -k 3 --source 'keys*' --json
  footnote search "on-call rota" --groups engineering                # plus `everyone`
  footnote search "on-call rota" --groups engineering --strict-groups # engineering only""",
    "ask": """\
  footnote ask "How often do I have to change my API key?" --index .footnote/handbook
  footnote ask "..." --model openai:gpt-4.1-mini        # or openai/gpt-4.1-mini
  footnote ask "..." --model openai:smollm2 --base-url http://127.0.0.1:8080/v1
  footnote ask "..." --json --quiet --reranker sentence
  footnote ask "Who is on call?" --groups engineering --strict-groups   # engineering only""",
    "chat": """\
  footnote chat --index .footnote/handbook                 # then type; Ctrl-D ends
  footnote ask "How often do I have to change my API key?" --thread keys
  footnote ask "and what happens to the old one?" --thread keys   # a follow-up
  footnote chat --thread keys --forget""",
    "serve": """\
  footnote serve --index .footnote/handbook        # chat page at http://127.0.0.1:2024/ui
  footnote serve --port 8123 --verbose             # the server's own log on this terminal
  footnote serve --checkpoint-url postgresql://user@localhost:5432/footnote""",
    "eval": """\
  footnote eval tests/fixtures/beir_tiny                     # ships with the repository
  footnote eval tests/fixtures/beir_tiny --stages bm25 dense --json
  python benchmarks/build_pyfaq.py && footnote eval benchmarks/data/pyfaq   # needs python3-doc
  footnote eval tests/fixtures/beir_tiny --answers --quiet""",
    "cache": """\
  footnote cache --index .footnote/handbook                 # entries and size on disk
  footnote cache prune --keep 100000 --index .footnote/handbook
  footnote cache prune --keep 0 --json                       # empty it""",
    "feedback": """\
  footnote feedback export golden/ --index .footnote/handbook   # rated answers as BEIR
  footnote eval golden/ && footnote eval golden/ --answers       # the team's own gate""",
    "mcp": """\
  footnote mcp --index .footnote/handbook                 # for a desktop client or an editor
  footnote mcp --index .footnote/handbook --groups hr     # as a member of hr (and everyone)
  footnote mcp --index .footnote/handbook --admin         # every document; the admin tools""",
    "graph": """\
  footnote graph --index .footnote/handbook              # the entities you may read
  footnote graph "service account" --groups engineering  # its documents and neighbours
  footnote graph --communities                           # communities and their summaries
  footnote graph --json --limit 50                       # for scripts""",
    "keys": """\
  footnote keys --file keys.json add alice --group engineering   # prints alice's key once
  footnote keys list --json                                      # reads $FOOTNOTE_API_KEYS
  footnote keys revoke alice                                     # or: revoke --id ID""",
    "audit": """\
  footnote audit --index .footnote/handbook          # who changed what, newest last
  footnote audit --json --limit 20                   # for scripts""",
    "backup": """\
  footnote backup /backups/handbook.tar.gz --index .footnote/handbook
  footnote backup handbook-index.tar.gz --no-feedback   # the index only""",
    "restore": """\
  footnote restore /backups/handbook.tar.gz --index .footnote/handbook""",
}
"""Examples shown at the end of each subcommand's --help."""


def finish(parser: argparse.ArgumentParser) -> None:
    """Give every subcommand its examples and a `--debug` flag; and `--version` to the
    command itself."""
    from footnote import __version__

    parser.add_argument("--version", action="version", version=f"footnote {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks of errors")
    for action in parser._subparsers._group_actions if parser._subparsers else []:
        if not isinstance(action, argparse._SubParsersAction):
            continue
        for name, sub in action.choices.items():
            examples = EXAMPLES.get(name)
            if examples and not sub.epilog:
                sub.epilog = f"examples:\n{examples}"
                sub.formatter_class = argparse.RawDescriptionHelpFormatter
            # SUPPRESS: `footnote --debug ask ...` is not reset by the subcommand's default.
            sub.add_argument(
                "--debug",
                action="store_true",
                default=argparse.SUPPRESS,
                help="show tracebacks of errors",
            )


def index_status(exc: BaseException) -> int:
    """The exit status for an index problem: 3 when its server could not be reached, else 2."""
    from footnote.store.types import IndexUnreachable

    return 3 if isinstance(exc, IndexUnreachable) else 2


def report(exc: BaseException) -> int:
    """Print one line for `exc` on stderr and return the exit status."""
    from footnote.models.providers import (
        ProviderProblem,
        ProviderUnreachable,
        describe_unreachable,
        first_line,
    )
    from footnote.store.types import IndexError_

    unreachable = describe_unreachable(exc)
    if isinstance(exc, ProviderUnreachable):
        message, status = str(exc), 3
    elif isinstance(exc, ProviderProblem | IndexError_):
        message, status = str(exc), index_status(exc)
    elif unreachable is not None:
        message, status = f"a provider failed: {unreachable}", 3
    else:
        message, status = f"{type(exc).__name__}: {first_line(exc)} (--debug shows where)", 1
    print(f"footnote: {' '.join(message.split())}", file=sys.stderr)
    return status
