"""Footnote as a tool for another agent: a question in, a cited answer out."""

from __future__ import annotations

from typing import Any

from langchain_core.tools import BaseTool, StructuredTool
from langgraph.graph.state import CompiledStateGraph


def answer_tool(
    graph: CompiledStateGraph[Any, Any, Any, Any],
    *,
    context: dict[str, Any] | None = None,
    name: str = "ask_documents",
    description: str = (
        "Answer a question from the team's own documents. Returns the answer with numbered "
        "citations and the list of sources; says so when the documents do not cover it."
    ),
) -> BaseTool:
    """Wrap a compiled answer graph as a tool. The context (index, the caller's access
    groups) is fixed by the embedding application, never chosen by the calling model."""

    def ask_documents(question: str) -> str:
        out = graph.invoke(
            {"messages": [{"role": "user", "content": question}]}, context=dict(context or {})
        )
        lines = [str(out["messages"][-1].content)]
        for c in out.get("citations", []):
            where = c.get("url") or c.get("source")
            lines.append(f"[{c['n']}] {where} § {c.get('section') or ''}".rstrip(" §"))
        return "\n".join(lines)

    return StructuredTool.from_function(ask_documents, name=name, description=description)
