"""How to start the LangGraph server for Footnote: one home for the command and environment,
used by `footnote serve` and by the integration tests."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path
from typing import Any

from footnote.checkpoint import CHECKPOINT_URL_ENV
from footnote.store.backends import is_postgres

_TRACING_KEYS = ("LANGSMITH_API_KEY", "LANGCHAIN_API_KEY")


def server_environment(
    *, index_dir: str, tracing: bool = False, checkpoint_url: str = ""
) -> dict[str, str]:
    """Quiet and offline by default: no analytics, no version check, no tracing.

    With a LangSmith key in the environment the server turns tracing on by itself, so the
    keys are removed unless tracing was asked for.
    """
    env = dict(os.environ)
    env.update(
        {
            "FOOTNOTE_INDEX": index_dir
            if is_postgres(index_dir)
            else str(Path(index_dir).resolve()),
            "LANGGRAPH_CLI_NO_ANALYTICS": "1",
            "LANGGRAPH_NO_VERSION_CHECK": "true",
            "TOKENIZERS_PARALLELISM": "false",
        }
    )
    if checkpoint_url:
        env[CHECKPOINT_URL_ENV] = checkpoint_url
    if tracing:
        env["LANGSMITH_TRACING"] = "true"
    else:
        env["LANGSMITH_TRACING"] = "false"
        for key in _TRACING_KEYS:
            env.pop(key, None)
    return env


GRAPH = "footnote.graph.graph:graph"
"""The served graph, named by module: the same config serves from a checkout or a wheel."""
CHECKPOINTER_MODULE = "footnote.checkpoint"
"""Home of the PostgreSQL saver. The server's checkpointer loader takes a file path, not a
dotted module, so the config names the installed module's file."""


def server_config(*, directory: Path, postgres_checkpoints: bool = False) -> Path:
    """Write the langgraph.json to serve into `directory` and return its path.

    It names the graph (and the checkpointer) by module rather than by file, so it needs no
    source tree: `footnote serve` works the same from an installed wheel. The repository's own
    langgraph.json names files, for `langgraph dev` run in a checkout.
    """
    data: dict[str, Any] = {
        "dependencies": ["."],
        "graphs": {"footnote": GRAPH},
        "python_version": "3.11",
    }
    if postgres_checkpoints:
        # The saver reads its database from $FOOTNOTE_CHECKPOINT_URL.
        spec = importlib.util.find_spec(CHECKPOINTER_MODULE)
        assert spec is not None and spec.origin is not None
        data["checkpointer"] = {"path": f"{spec.origin}:server_checkpointer"}
    target = directory / "langgraph.json"
    target.write_text(json.dumps(data, indent=2), encoding="utf-8")
    return target


def server_command(*, host: str, port: int, config: Path) -> list[str]:
    """`langgraph dev` for `config`; run it with the config's folder as working directory
    (the server keeps its `.langgraph_api/` state there)."""
    langgraph = Path(sys.executable).with_name("langgraph")
    return [
        str(langgraph) if langgraph.exists() else "langgraph",
        "dev",
        "--no-browser",
        "--no-reload",
        "--host",
        host,
        "--port",
        str(port),
        "--config",
        str(config),
    ]
