"""The threads of `footnote chat` and `footnote ask --thread NAME` (both in ask.py): a
conversation from the command line.

Each thread's history (the messages and the last answer's citations) is a JSON file in the
user's Footnote state folder, one folder per index, readable by its owner only (0600 in a
0700 folder). A turn restores it into the answer graph's own state, so a follow-up is made
standalone exactly as on the page or through the API (the graph's `plan_turn`), and "which
source was that?" sees the previous citations.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path
from typing import Any

THREAD_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
"""A thread name is a file name: letters, digits, `_`, `.`, `-`; no path, no dotfile."""

GRAPH_THREAD = "footnote-chat"
"""The thread id inside the in-process checkpointer a turn restores the history into."""


class ThreadProblem(ValueError):
    """A thread name or history file that cannot be used; the message says what to do."""


def history_path(index: str, thread: str) -> Path:
    """Where a thread's history lives: state folder / chats / index digest / THREAD.json."""
    from footnote.models.embedding_choice import record_key
    from footnote.store.private import state_dir

    if not THREAD_NAME.fullmatch(thread):
        raise ThreadProblem(
            f"thread name {thread!r}: use up to 64 letters, digits, '_', '.' or '-'"
        )
    digest = hashlib.sha256(record_key(index).encode("utf-8")).hexdigest()[:16]
    return state_dir() / "chats" / digest / f"{thread}.json"


def load_history(path: Path) -> tuple[list[Any], list[dict[str, Any]]]:
    """(messages, last citations) of a thread; empty for a new one. A file that is not a
    history this module wrote is refused with a line saying how to start over."""
    from langchain_core.messages import messages_from_dict

    if not path.exists():
        return [], []
    try:
        data = json.loads(path.read_text("utf-8"))
        messages = messages_from_dict(data["messages"])
        citations = data.get("citations") or []
        if not isinstance(citations, list) or not all(isinstance(c, dict) for c in citations):
            raise ValueError("citations are not a list of objects")
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ThreadProblem(
            f"the chat history {path} cannot be read ({exc}); --forget starts the thread over"
        ) from exc
    return messages, citations


def save_history(path: Path, index: str, state: dict[str, Any]) -> None:
    """Write the thread's messages and citations, owner-only, atomically (a reader never
    sees half a file)."""
    from langchain_core.messages import messages_to_dict

    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(path.parent, 0o700)
    payload = {
        "index": str(index),
        "messages": messages_to_dict(state.get("messages") or []),
        "citations": state.get("citations") or [],
    }
    scratch = path.with_suffix(".tmp")
    fd = os.open(scratch, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        json.dump(payload, out, ensure_ascii=False)
    os.replace(scratch, path)


class Conversation:
    """A thread restored into the answer graph: `graph` and `config` to run a turn with,
    then `save()` to keep what the turn added."""

    def __init__(self, index: str, thread: str) -> None:
        from langchain_core.runnables import RunnableConfig
        from langgraph.checkpoint.memory import InMemorySaver

        from footnote.graph.graph import make_graph

        self.index = index
        self.path = history_path(index, thread)
        messages, citations = load_history(self.path)
        self.graph = make_graph(checkpointer=InMemorySaver())
        self.config: RunnableConfig = {"configurable": {"thread_id": GRAPH_THREAD}}
        if messages:
            # As if the last turn had just finished here: the next question's `new_question`
            # takes these citations as the previous ones, `plan_turn` sees the messages.
            self.graph.update_state(
                self.config,
                {"messages": messages, "citations": citations},
                as_node="verify_citations",
            )

    def save(self) -> None:
        save_history(self.path, self.index, dict(self.graph.get_state(self.config).values))


def forget(index: str, thread: str) -> bool:
    """Delete a thread's history; whether there was one."""
    path = history_path(index, thread)
    if not path.exists():
        return False
    path.unlink()
    return True
