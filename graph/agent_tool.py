"""Footnote as a tool for another agent: a question in, a cited answer and its sources out."""

from __future__ import annotations

import dataclasses
from typing import Any

from langchain.tools import ToolRuntime
from langchain_core.messages import HumanMessage
from langchain_core.tools import BaseTool, tool
from langgraph.graph.state import CompiledStateGraph

from footnote.graph.context import Context
from footnote.graph.state import InputState

DESCRIPTION = (
    "Answer a question from the team's own documents. Returns the answer with numbered "
    "citations and the list of sources; says so when the documents do not cover it."
)


def answer_tool(
    graph: CompiledStateGraph[Any, Any, Any, Any] | None = None,
    *,
    context: Context | dict[str, Any] | None = None,
    name: str = "ask_documents",
    description: str = DESCRIPTION,
) -> BaseTool:
    """Wrap the answer graph as a tool whose only argument is the question.

    `context` holds the application's settings (index, model, ...). At each call the calling
    agent's own runtime context is read too: the Footnote fields it has (the caller's
    `user_groups`, `admin`, ...) override those settings, so the groups are the ones of the
    request being served. Neither can be chosen by the calling model. The tool's artifact is
    `{"answer", "citations", "notices"}`, the citations structured as the graph returns them.
    """
    if graph is None:
        from footnote.graph.graph import make_graph

        graph = make_graph()
    answer_graph = graph
    settings = Context.coerce(context)

    @tool(name, description=description, response_format="content_and_artifact")
    def ask_documents(question: str, runtime: ToolRuntime) -> tuple[str, dict[str, Any]]:
        """Answer `question` from the documents."""
        run_context = dataclasses.replace(settings, **Context.known_fields(runtime.context))
        request = InputState(messages=[HumanMessage(question)])
        out = answer_graph.invoke(request, context=run_context)
        answer = str(out["messages"][-1].content)
        citations = list(out.get("citations", []))
        lines = [answer]
        for c in citations:
            where = c.get("url") or c.get("source")
            lines.append(f"[{c['n']}] {where} § {c.get('section') or ''}".rstrip(" §"))
        notices = out.get("footnote_notices", [])
        artifact = {"answer": answer, "citations": citations, "notices": notices}
        return "\n".join(lines), artifact

    return ask_documents
