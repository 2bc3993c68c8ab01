"""`footnote ask` and `footnote chat`: questions answered on the command line."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from typing import Any, cast

from footnote.cli.options import add_context_options, add_index_option, context_settings
from footnote.store.redaction import redact


def _print_sources(citations: list[dict[str, Any]]) -> None:
    from footnote.cli.console import format_location

    if not citations:
        return
    print("\nSources:")
    for c in citations:
        print(f"  [{c['n']}] {format_location(c)}")


def cmd_ask(args: argparse.Namespace) -> int:
    from langchain_core.messages import HumanMessage
    from langchain_core.runnables import RunnableConfig

    from footnote.graph.context import Context
    from footnote.graph.grader import prepare_offline_grader
    from footnote.store.types import IndexError_

    missing = _missing_index_status(args.index)
    if missing is not None:
        return missing
    context = Context(index_dir=args.index, **context_settings(args, ANSWER_SETTINGS))
    if not context.model:  # graded offline: its model loads while the graph is imported
        prepare_offline_grader(context.offline_grader)
    from footnote.graph.graph import make_graph
    from footnote.graph.model_calls import describe_failure
    from footnote.graph.state import InputState

    conversation = None
    if getattr(args, "thread", None):
        from footnote.cli.chat import Conversation, ThreadProblem

        try:
            conversation = Conversation(args.index, args.thread)
        except ThreadProblem as exc:
            print(f"footnote: {exc}", file=sys.stderr)
            return 2
    graph = conversation.graph if conversation else make_graph()
    request = InputState(messages=[HumanMessage(args.question)])
    config: RunnableConfig = {
        "run_name": "footnote ask",
        "metadata": {"index": args.index, "model": args.model or "offline"},
        **(conversation.config if conversation else {}),
    }
    streaming = sys.stdout.isatty() and not args.json
    final: dict[str, Any] = {}
    printed_answer = False
    try:
        # With several stream modes, each item is a (mode, payload) pair.
        events = cast(
            Iterator[tuple[str, Any]],
            graph.stream(
                request, config, context=context, stream_mode=["custom", "messages", "values"]
            ),
        )
        for mode, payload in events:
            if mode == "values":
                final = payload
            elif mode == "custom" and not args.json and not args.quiet:
                if payload.get("event") != "answer":
                    print(_describe(payload), file=sys.stderr, flush=True)
            elif mode == "messages" and streaming:
                chunk, meta = payload
                if meta.get("langgraph_node") == "generate" and chunk.content:
                    print(chunk.content, end="", flush=True)
                    printed_answer = True
    except IndexError_ as exc:
        from footnote.cli.conventions import index_status

        print(f"footnote: {redact(str(exc))}", file=sys.stderr)
        return index_status(exc)
    except Exception as exc:
        failure = describe_failure(exc)
        if failure is None:
            raise
        print(f"\nfootnote: the chat model failed: {failure}", file=sys.stderr)
        return 3
    if conversation:
        conversation.save()
    answer = final["messages"][-1].content if final.get("messages") else ""
    citations = final.get("citations", [])
    if args.json:
        print(json.dumps(_json_result(answer, citations, final), indent=2, ensure_ascii=False))
        return 0
    if printed_answer:
        print()  # what streamed is the checked answer: generate streams nothing else
    else:
        print(answer)
    _print_sources(citations)
    for notice in final.get("footnote_notices", []):
        print(f"note: {notice}", file=sys.stderr)
    return 0


def _json_result(answer: str, citations: list[Any], final: dict[str, Any]) -> dict[str, Any]:
    """What `footnote ask --json` prints: the answer and how the graph reached it."""
    from footnote.graph.state import planned_route

    path = final.get("footnote_route", [])
    return {
        "answer": answer,
        "citations": citations,
        "route": planned_route(path),
        "path": path,
        "notices": final.get("footnote_notices", []),
        "invalid_citations": final.get("footnote_invalid_citations", []),
        "unsupported_claims": final.get("footnote_unsupported_claims", []),
        "parts": final.get("parts", []),
        "searches": final.get("footnote_searches", 0),
        "model_calls": final.get("footnote_model_calls", 0),
        "communities": final.get("footnote_communities", []),
        "hops": final.get("footnote_hops", []),
    }


def _missing_index_status(index: str) -> int | None:
    """The exit status (after one line on stderr) when `index` holds no index, else None.

    A greeting is answered without a search, so without this check `ask "hi"` and `chat`
    would exit 0 on an index that does not exist, unlike every other command."""
    from footnote.store.backends import require_index
    from footnote.store.types import IndexError_

    try:
        require_index(index)
    except IndexError_ as exc:
        from footnote.cli.conventions import index_status

        print(f"footnote: {redact(str(exc))}", file=sys.stderr)
        return index_status(exc)
    return None


def cmd_chat(args: argparse.Namespace) -> int:
    """Ask each line read from stdin in one thread, until end of input (Ctrl-D)."""
    if args.forget:
        return cmd_forget(args)
    missing = _missing_index_status(args.index)
    if missing is not None:
        return missing
    prompt = sys.stdin.isatty()
    if prompt:
        print(
            f"footnote chat: thread {args.thread!r} on {args.index}; Ctrl-D ends, "
            f"`footnote chat --thread {args.thread} --forget` deletes it",
            file=sys.stderr,
        )
    status = 0
    while True:
        if prompt:
            print("> ", end="", file=sys.stderr, flush=True)
        line = sys.stdin.readline()
        if not line:
            return status
        question = line.strip()
        if not question:
            continue
        status = cmd_ask(argparse.Namespace(**{**vars(args), "question": question}))
        print(flush=True)


def cmd_forget(args: argparse.Namespace) -> int:
    from footnote.cli.chat import forget

    if forget(args.index, args.thread):
        print(f"footnote: thread {args.thread!r} forgotten")
        return 0
    print(f"footnote: no thread {args.thread!r} for {args.index}", file=sys.stderr)
    return 1


def _describe(event: dict[str, Any]) -> str:
    kind = event.get("event")
    if kind == "rewriting":
        return (
            f"… attempt {event['attempt']}: searching for {event['query']!r} ({event['strategy']})"
        )
    if kind == "retrieved":
        return f"… retrieved {event['candidates']} candidates"
    if kind == "graded":
        how = "" if event.get("method") in (None, "offline") else f" ({event['method']})"
        return f"… graded {event['relevant']} of {event['candidates']} relevant{how}"
    if kind == "web_search":
        return f"… searching the web for {event['query']!r}"
    if kind == "fallback_search":
        return f"… the model made no search call; searching for {event['query']!r}"
    if kind == "planned":
        return _describe_plan(event)
    return f"… {event}"


def _describe_plan(event: dict[str, Any]) -> str:
    parts = event.get("parts") or []
    if event.get("turn") != "search":
        return "… no search needed"
    if len(parts) < 2:
        return "… planned one search"
    return f"… planned {len(parts)} parts: " + "; ".join(repr(p) for p in parts)


ANSWER_SETTINGS = (
    "model",
    "model_base_url",
    "embeddings",
    "hyde",
    "web_search",
    "retrieve_k",
    "max_retrieval_attempts",
    "user_groups",
    "strict_groups",
    "reranker",
    "max_answer_tokens",
    "model_timeout_s",
    "planner",
    "max_searches_per_turn",
)
"""The `Context` fields `ask` and `chat` take from the command line (footnote/cli/options.py)."""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "ask",
        help="answer a question from the index, with numbered citations",
        description=(
            "Answer QUESTION from the index. Without --model the embedded default answers "
            "extractively (no LLM, no network); with --model any init_chat_model string."
        ),
    )
    p.add_argument("question")
    p.add_argument(
        "--thread",
        default="",
        metavar="NAME",
        help="continue this conversation (kept in the state folder, as `footnote chat`): a "
        "follow-up is read in the light of the earlier questions",
    )
    add_answer_options(p)
    p.set_defaults(func=cmd_ask)

    p = sub.add_parser(
        "chat",
        help="hold a conversation: each line read is a question, follow-ups understood",
        description="Ask each line read from standard input in one thread, until end of input "
        "(Ctrl-D). The thread's history is kept owner-only in the user's state folder "
        "(~/.local/state/footnote/chats, or $FOOTNOTE_STATE_DIR), one folder per index, so a "
        "later `footnote chat` or `footnote ask --thread NAME` continues it.",
    )
    p.add_argument("--thread", default="default", metavar="NAME", help="(default: %(default)s)")
    p.add_argument("--forget", action="store_true", help="delete the thread's history and stop")
    add_answer_options(p)
    p.set_defaults(func=cmd_chat)


def add_answer_options(p: argparse.ArgumentParser) -> None:
    """What `ask` and `chat` both take: the index, the models, and the graph's settings."""
    add_index_option(p)
    add_context_options(p, ANSWER_SETTINGS)
    p.add_argument(
        "--json", action="store_true", help="print answer, citations, route and path as JSON"
    )
    p.add_argument("--quiet", action="store_true", help="no progress lines")
