"""`footnote serve`: the LangGraph server for the answer graph, or with --production Aegra on
PostgreSQL + Redis. The options and the command live here; the launchers in footnote.server."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from footnote.cli.corpus import add_schedule_options, served_schedule
from footnote.cli.options import add_index_option
from footnote.store.redaction import redact


def cmd_serve(args: argparse.Namespace) -> int:
    with served_schedule(args):  # --sync-every / --permissions-every, stopped with the server
        return _serve(args)


def _serve(args: argparse.Namespace) -> int:
    if args.production:  # Aegra on PostgreSQL + Redis
        return _serve_production(args)
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
    from footnote.store.private import state_dir

    path = Path(given) if given else state_dir() / f"serve-{port}.log"
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def _serve_production(args: argparse.Namespace) -> int:
    from footnote.server.production import LaunchSettings, serve_production

    return serve_production(
        LaunchSettings(
            index_dir=args.index,
            host=args.host,
            port=args.port,
            replicas=args.replicas,
            database_url=args.database_url,
            redis_url=args.redis_url,
            python=args.python,
            data_dir=args.data_dir,
            ephemeral=args.ephemeral,
            metrics=args.metrics,
            tracing=args.tracing,
            log_format=args.log_format,
        )
    )


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "serve",
        help="run the LangGraph server (API, chat page at /ui, Studio) for the answer graph",
        description="Start `langgraph dev` for this project, quiet and offline by default.",
    )
    add_index_option(p)
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
    add_schedule_options(p)
    known = len(p._actions)
    add_production_options(p)
    # What only --production reads, with its default: `footnote serve` refuses it given alone.
    production_only = {
        action.dest: (action.option_strings[0], action.default)
        for action in p._actions[known:]
        if action.dest != "production"
    }
    p.set_defaults(func=cmd_serve, production_only=production_only)


def add_production_options(parser: argparse.ArgumentParser) -> None:
    """`footnote serve --production` and its settings (added to the serve command)."""
    from footnote.server.production import LOG_FORMATS

    group = parser.add_argument_group("production (Aegra on PostgreSQL + Redis)")
    group.add_argument(
        "--production",
        action="store_true",
        help="serve on Aegra: replicas sharing PostgreSQL + Redis (needs Python 3.12+)",
    )
    group.add_argument(
        "--replicas", type=int, default=1, help="replicas to start here (ports PORT, PORT+1, ...)"
    )
    group.add_argument(
        "--database-url",
        default=os.environ.get("DATABASE_URL", ""),
        metavar="POSTGRESQL_URL",
        help="threads, runs and checkpoints (default: $DATABASE_URL; unset: a local trial "
        "PostgreSQL kept in --data-dir)",
    )
    group.add_argument(
        "--redis-url",
        default=os.environ.get("REDIS_URL", ""),
        metavar="REDIS_URL",
        help="the run queue and event bus (default: $REDIS_URL; unset: a local redis-server "
        "with a generated password)",
    )
    group.add_argument(
        "--data-dir",
        type=Path,
        default=None,
        help="the trial PostgreSQL and the logs (default: $FOOTNOTE_STATE_DIR/production, "
        "else ~/.local/state/footnote/production; as root /var/lib/footnote/production)",
    )
    group.add_argument(
        "--ephemeral",
        action="store_true",
        help="the trial PostgreSQL in a temporary folder, deleted on exit",
    )
    group.add_argument(
        "--log-format",
        choices=LOG_FORMATS,
        default="console",
        help="how the launcher and the replicas write their logs (stdout and <data-dir>/logs)",
    )
    group.add_argument(
        "--metrics",
        action="store_true",
        help="Prometheus metrics at GET /metrics on each replica, for admins only (default: "
        "off, unless $FOOTNOTE_METRICS=1); --tracing turns on LangSmith and OTEL_TARGETS",
    )
    group.add_argument(
        "--python",
        default="",
        help="interpreter with aegra-api (default: see footnote.server.production)",
    )
