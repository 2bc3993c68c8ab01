"""`footnote ask` and `footnote serve`: the answer half of the command line."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast

from footnote.cli.console import add_reranker_options
from footnote.store.postgres import redact


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
    from footnote.graph.graph import make_graph
    from footnote.graph.models import describe_failure
    from footnote.graph.state import InputState
    from footnote.store.types import IndexError_

    missing = _missing_index_status(args.index)
    if missing is not None:
        return missing
    given = {
        "retrieve_k": args.k,
        "max_retrieval_attempts": args.attempts,
        "reranker": args.reranker,
        "user_groups": args.groups.split(",") if args.groups else None,
        "strict_groups": args.strict_groups or None,
        "max_answer_tokens": args.max_answer_tokens,
        "model_timeout_s": args.timeout,
        "planner": args.planner,
        "max_searches_per_turn": args.max_searches,
    }
    # Options left out keep the Context's own defaults: they are declared there only.
    context = Context(
        index_dir=args.index,
        model=args.model,
        model_base_url=args.base_url,
        embeddings=args.embeddings,
        hyde=args.hyde,
        web_search=args.web,
        **{name: value for name, value in given.items() if value is not None},
    )
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


def cmd_serve(args: argparse.Namespace) -> int:
    if getattr(args, "production", False):  # Aegra on PostgreSQL + Redis
        from footnote.server.production import cmd_serve_production

        return cmd_serve_production(args)
    import signal
    import subprocess
    import tempfile

    from footnote.server.langgraph_dev import (
        available_port,
        exit_reason,
        server_command,
        server_config,
        server_environment,
        wait_until_serving,
    )

    problem = _serve_problem(args)
    if problem is not None:
        return problem
    env = server_environment(
        index_dir=args.index, tracing=args.tracing, checkpoint_url=args.checkpoint_url
    )
    port = available_port(args.host, args.port)
    if args.port and port != args.port:
        print(f"Port {args.port} is in use on {args.host}; serving on port {port} instead.")
    url = f"http://{args.host}:{port}"
    # A stop request for `footnote serve` stops the server too, not only this wrapper.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    with tempfile.TemporaryDirectory() as scratch:
        config = server_config(
            directory=Path(scratch), postgres_checkpoints=bool(args.checkpoint_url)
        )
        command = server_command(host=args.host, port=port, config=config)
        # The server keeps its state (.langgraph_api/) beside the config it was given; its
        # own log (a line per request) goes to a file unless --verbose.
        log = None if args.verbose else serve_log(args.log_file, port)
        sink = log.open("ab") if log else None
        process = subprocess.Popen(
            command, env=env, cwd=scratch, stdout=sink, stderr=subprocess.STDOUT if sink else None
        )
        try:
            if wait_until_serving(url, process, timeout_s=args.startup_timeout):
                threads = "PostgreSQL" if args.checkpoint_url else "in memory"
                print(
                    f"Footnote server: {url}  chat page: {url}/ui  "
                    f"Studio: https://smith.langchain.com/studio/?baseUrl={url}  "
                    f"(index: {redact(args.index)}; threads: {threads}"
                    + (f"; log: {log})" if log else ")"),
                    flush=True,
                )
            elif process.poll() is None:
                print(
                    f"footnote: the server did not answer on {url} within "
                    f"{args.startup_timeout:.0f} s" + (f" (log: {log})" if log else ""),
                    file=sys.stderr,
                )
            else:
                reason = exit_reason(log) if log else ""
                print(
                    f"footnote: the server exited with {process.returncode}"
                    + (f": {redact(reason)}" if reason else "")
                    + (f" (log: {log})" if log else ""),
                    file=sys.stderr,
                )
            return process.wait()
        except KeyboardInterrupt:
            return 130
        finally:
            if process.poll() is None:
                process.terminate()
                try:
                    process.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    process.kill()
            if sink:
                sink.close()


def _serve_problem(args: argparse.Namespace) -> int | None:
    """The exit status (after one line on stderr) when `footnote serve` cannot start as asked,
    found before the server is started; None when it can. Options only --production reads
    would otherwise be ignored without a word, and a database that is missing its driver or
    cannot be reached would surface only as the server's exit status."""
    import shutil

    from footnote.store.backends import is_postgres
    from footnote.store.types import IndexError_

    ignored = [
        flag
        for dest, (flag, default) in args.production_only.items()
        if getattr(args, dest) != default
    ]
    if ignored:
        print(
            f"footnote: {', '.join(ignored)} {'needs' if len(ignored) == 1 else 'need'} "
            "--production (Aegra on PostgreSQL + Redis): add --production, or leave "
            f"{'it' if len(ignored) == 1 else 'them'} out",
            file=sys.stderr,
        )
        return 2
    if shutil.which("langgraph", path=os.path.dirname(sys.executable)) is None and not shutil.which(
        "langgraph"
    ):
        from footnote.models.providers import install_hint

        print(
            f"footnote: serve needs the LangGraph server: {install_hint('serve')}",
            file=sys.stderr,
        )
        return 2
    try:
        if is_postgres(args.index):
            from footnote.store.postgres import require_driver

            require_driver()
        if args.checkpoint_url:
            from footnote.server.checkpoint import check_database

            check_database(args.checkpoint_url)
    except IndexError_ as exc:
        from footnote.cli.conventions import index_status

        print(f"footnote: {redact(str(exc))}", file=sys.stderr)
        return index_status(exc)
    return None


def serve_log(given: str, port: int) -> Path:
    """Where the server's own log goes: --log-file, else the user's Footnote state folder."""
    from footnote.models.embedding_choice import state_dir

    path = Path(given) if given else state_dir() / f"serve-{port}.log"
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def add_commands(sub: argparse._SubParsersAction, default_index: Callable[[], str]) -> None:
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
    add_answer_options(p, default_index)
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
    add_answer_options(p, default_index)
    p.set_defaults(func=cmd_chat)

    add_serve_command(sub, default_index)


def add_answer_options(p: argparse.ArgumentParser, default_index: Callable[[], str]) -> None:
    """What `ask` and `chat` both take: the index, the models, and the graph's settings."""
    from footnote.graph.context import Context  # light: no graph, no models

    defaults = Context()
    p.add_argument(
        "--index", default=default_index(), help="index directory (default: %(default)s)"
    )
    p.add_argument(
        "--model",
        default=os.environ.get("FOOTNOTE_MODEL", ""),
        metavar="PROVIDER:MODEL",
        help="chat model, e.g. openai:gpt-4.1-mini (default: $FOOTNOTE_MODEL, else offline)",
    )
    p.add_argument(
        "--base-url",
        default=os.environ.get("FOOTNOTE_MODEL_BASE_URL", ""),
        help="OpenAI-compatible server URL for an openai:... model",
    )
    p.add_argument(
        "--embeddings", default="", metavar="PROVIDER:MODEL", help="must match the index"
    )
    p.add_argument(
        "--hyde", action="store_true", help="also search with a hypothetical answer (needs --model)"
    )
    p.add_argument(
        "--web", action="store_true", help="fall back to Tavily web search (needs TAVILY_API_KEY)"
    )
    p.add_argument(
        "-k", type=int, help=f"chunks retrieved per search (default: {defaults.retrieve_k})"
    )
    p.add_argument(
        "--attempts",
        type=int,
        help=f"max retrieval rounds (default: {defaults.max_retrieval_attempts})",
    )
    p.add_argument(
        "--groups",
        default="",
        help="comma-separated access groups of the caller; `everyone` is always added "
        f"(default: {','.join(defaults.user_groups)})",
    )
    p.add_argument(
        "--strict-groups",
        action="store_true",
        help="answer from exactly --groups, without `everyone`",
    )
    add_reranker_options(p, model=False, default=None)
    p.add_argument(
        "--max-answer-tokens",
        type=int,
        metavar="N",
        help=f"most tokens the model's answer may use (default: {defaults.max_answer_tokens}; "
        "0: no limit)",
    )
    p.add_argument(
        "--timeout",
        type=float,
        metavar="SECONDS",
        help="seconds the model server may stay silent before a call fails; not retried "
        f"(default: {defaults.model_timeout_s:g})",
    )
    p.add_argument(
        "--planner",
        choices=["model", "rules"],
        help="who decides whether and what to search: the chat model or the offline rules "
        f"(default: {defaults.planner}; without --model always the rules)",
    )
    p.add_argument(
        "--max-searches",
        type=int,
        metavar="N",
        help=f"most searches one question may make (default: {defaults.max_searches_per_turn})",
    )
    p.add_argument(
        "--json", action="store_true", help="print answer, citations, route and path as JSON"
    )
    p.add_argument("--quiet", action="store_true", help="no progress lines")


def add_serve_command(sub: argparse._SubParsersAction, default_index: Callable[[], str]) -> None:
    p = sub.add_parser(
        "serve",
        help="run the LangGraph server (API, chat page at /ui, Studio) for the answer graph",
        description="Start `langgraph dev` for this project, quiet and offline by default.",
    )
    p.add_argument(
        "--index", default=default_index(), help="index directory (default: %(default)s)"
    )
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument(
        "--port",
        type=int,
        default=2024,
        help="port to listen on; when it is taken, a free one is used and printed",
    )
    p.add_argument(
        "--startup-timeout",
        type=float,
        default=120.0,
        metavar="SECONDS",
        help="how long to wait for the server to answer before saying so",
    )
    p.add_argument(
        "--checkpoint-url",
        default=os.environ.get("FOOTNOTE_CHECKPOINT_URL", ""),
        metavar="POSTGRESQL_URL",
        help="keep conversation threads in PostgreSQL (default: $FOOTNOTE_CHECKPOINT_URL; "
        "unset: in memory)",
    )
    p.add_argument(
        "--tracing", action="store_true", help="send traces to LangSmith (needs LANGSMITH_API_KEY)"
    )
    p.add_argument(
        "--verbose", action="store_true", help="show the server's own log here, not in a file"
    )
    p.add_argument(
        "--log-file",
        default="",
        metavar="PATH",
        help="the server's log (default: serve-PORT.log in ~/.local/state/footnote, or "
        "$FOOTNOTE_STATE_DIR)",
    )
    from footnote.server.production import add_production_options

    known = len(p._actions)
    add_production_options(p)
    # What only --production reads, with its default: `footnote serve` refuses it given alone.
    production_only = {
        action.dest: (action.option_strings[0], action.default)
        for action in p._actions[known:]
        if action.dest != "production"
    }
    p.set_defaults(func=cmd_serve, production_only=production_only)
