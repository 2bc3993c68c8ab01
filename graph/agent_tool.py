"""Footnote as a tool for another agent: a question in, a cited answer and its sources out.

A plain LangChain tool: callable directly (`tool.invoke({"question": ...})`), in
`create_agent`, in a `ToolNode`; it passes LangChain's own tool test suites. Its only argument
is the question: who is asking and where to look never come from the calling model.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from langchain_core.messages import HumanMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool, ToolException, tool
from langgraph.graph.state import CompiledStateGraph

from footnote.graph.context import Context
from footnote.graph.model_calls import describe_failure
from footnote.graph.state import InputState
from footnote.models.providers import describe_unreachable
from footnote.store.types import IndexError_

DESCRIPTION = (
    "Answer a question from the team's own documents. Returns the answer with numbered "
    "citations and the list of sources; says so when the documents do not cover it."
)


def caller_context(config: RunnableConfig | None) -> Any:
    """Where the caller's settings come from: the calling agent's runtime context when the
    tool runs inside a graph (a ToolNode, `create_agent`); otherwise, called directly by the
    host's own code (embedded only), the `configurable` of the config it was given."""
    from langgraph.runtime import get_runtime

    try:
        runtime = get_runtime()
    except (RuntimeError, KeyError):
        runtime = None
    if runtime is not None:
        return runtime.context
    return (config or {}).get("configurable") or {}


def tool_error(exc: BaseException) -> str | None:
    """One line for the calling agent when `exc` is a problem of set-up or of a provider (a
    missing index, a bad setting, a model that failed), else None (a bug: raised as is)."""
    if isinstance(exc, IndexError_ | ValueError | TypeError):
        return " ".join(str(exc).split())
    failure = describe_failure(exc) or describe_unreachable(exc)
    return f"the model failed: {failure}" if failure else None


def answer_tool(
    graph: CompiledStateGraph[Any, Any, Any, Any] | None = None,
    *,
    context: Context | dict[str, Any] | None = None,
    name: str = "ask_documents",
    description: str = DESCRIPTION,
) -> BaseTool:
    """Wrap the answer graph as a tool whose only argument is the question.

    `context` holds the application's settings (index, model, ...). At each call the caller's
    settings are read too (`caller_context`): the Footnote fields they have (the caller's
    `user_groups`, `admin`, ...) override those settings, so the groups are the ones of the
    request being served. Problems of set-up (a missing index, a bad setting, a provider that
    failed) come back as tool errors (a ToolMessage with status "error"), not exceptions. The
    tool's artifact is `{"answer", "citations", "notices"}`, the citations structured as the
    graph returns them.
    """
    if graph is None:
        from footnote.graph.graph import make_graph

        graph = make_graph()
    answer_graph = graph
    settings = Context.coerce(context)

    @tool(name, description=description, response_format="content_and_artifact")
    def ask_documents(question: str, config: RunnableConfig) -> tuple[str, dict[str, Any]]:
        """Answer `question` from the documents."""
        try:
            caller = Context.known_fields(caller_context(config))
            run_context = dataclasses.replace(settings, **caller)
            request = InputState(messages=[HumanMessage(question)])
            out = answer_graph.invoke(request, context=run_context)
        except Exception as exc:
            message = tool_error(exc)
            if message is None:
                raise
            raise ToolException(message) from exc
        answer = str(out["messages"][-1].content)
        citations = list(out.get("citations", []))
        lines = [answer]
        for c in citations:
            where = c.get("url") or c.get("source")
            lines.append(f"[{c['n']}] {where} § {c.get('section') or ''}".rstrip(" §"))
        notices = out.get("footnote_notices", [])
        artifact = {"answer": answer, "citations": citations, "notices": notices}
        return "\n".join(lines), artifact

    ask_documents.handle_tool_error = True
    return ask_documents
