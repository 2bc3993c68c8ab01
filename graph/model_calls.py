"""How the graph talks to chat models: built from the context, bounded, adapted to the endpoint.

Hosted providers and local OpenAI-compatible servers (llama.cpp, Ollama, vLLM, LM Studio)
accept different subsets of the same API. This module keeps those differences out of the
nodes:

- **Output budgets reach the server.** The answer and the internal calls (rewrite, HyDE,
  the agent step, grading) each get a token limit, sent in the form the endpoint honours:
  `max_tokens` in the request body for an OpenAI-compatible base URL (llama.cpp ignores
  `max_completion_tokens`, which the OpenAI client sends for `max_tokens`), the provider's
  own parameter elsewhere.
- **Structured output adapts.** json_schema, then function calling, then JSON mode with the
  schema in the prompt; the next method is tried only when the server rejects the *format*,
  never on a transient error, and what worked is remembered per model. A method on trial is
  sent without client retries, so a request rejected as malformed is not sent again.
- **The agent step names its tool.** Servers such as llama.cpp ignore tools unless
  `tool_choice` names one, so the search tool is requested by name where the model accepts it.
- **Timeouts fit local hardware.** `model_timeout_s` bounds the silence between bytes; answers
  stream, so a slow model is never cut off mid-answer, and a timeout is not retried, so a hung
  server ends with a clear error after that long.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable
from typing import Any, Literal, TypeVar

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage
from langchain_core.output_parsers import PydanticOutputParser
from langchain_core.runnables import Runnable, RunnableConfig
from langchain_core.tools import BaseTool
from pydantic import BaseModel

from footnote.graph import prompts
from footnote.graph.context import Context

Role = Literal["answer", "internal"]
"""Which output budget a call spends: the streamed answer, or a call the user never sees."""

StructuredMethod = Literal["json_schema", "function_calling", "json_mode"]
STRUCTURED_METHODS: tuple[StructuredMethod, ...] = ("json_schema", "function_calling", "json_mode")
"""Best first: json_schema is exact where supported, function calling nearly everywhere, JSON
mode (with the schema in the prompt) is the last resort."""

ToolRequest = Literal["named", "offered", "refused"]
"""How the agent step's tool reached the model: named in tool_choice, only offered, or refused
by the server."""

SchemaT = TypeVar("SchemaT", bound=BaseModel)
T = TypeVar("T")

_CLIENT_KWARGS_PROVIDERS = {"openai", "anthropic", "azure_openai", "groq", "mistralai", "xai"}
"""Providers whose chat model takes `timeout` and `max_retries` keyword arguments."""

_BUDGET_PARAMETER = {
    "anthropic": "max_tokens",
    "azure_openai": "max_tokens",
    "groq": "max_tokens",
    "mistralai": "max_tokens",
    "xai": "max_tokens",
    "deepseek": "max_tokens",
    "fireworks": "max_tokens",
    "together": "max_tokens",
    "ollama": "num_predict",
    "google_genai": "max_output_tokens",
    "google_vertexai": "max_output_tokens",
}
"""How each provider's chat model names its output limit (openai is handled on its own)."""

_FORMAT_WORDS = (
    "response_format",
    "json_schema",
    "json_object",
    "tool_choice",
    "tools",
    "function",
    "schema",
    "format",
    "grammar",
    "structured",
    "not supported",
    "unsupported",
    "input should be",
)
"""Words in an error message that show a server refused the request's shape, not its load."""


class StructuredOutputUnsupported(RuntimeError):
    """The server rejected every structured-output method."""


def provider_of(model: str) -> str:
    """The provider prefix of a 'provider:model' or 'provider/model' string ('' when the
    string has none)."""
    from footnote.models.providers import normalize_spec

    spec = normalize_spec(model, "chat") if model else model
    return spec.split(":", 1)[0] if ":" in spec else ""


def budget_kwargs(context: Context, max_tokens: int) -> dict[str, Any]:
    """The keyword arguments that give `init_chat_model` an output limit its endpoint honours."""
    if max_tokens <= 0:
        return {}
    provider = provider_of(context.model)
    if provider == "openai":
        if context.model_base_url:
            # Sent as-is in the request body; the client would rename a max_tokens argument
            # to max_completion_tokens, which llama.cpp's server ignores.
            return {"extra_body": {"max_tokens": max_tokens}}
        return {"max_tokens": max_tokens}
    parameter = _BUDGET_PARAMETER.get(provider)
    return {parameter: max_tokens} if parameter else {}


def is_format_rejection(exc: BaseException) -> bool:
    """True when the server refused the request's format (never for load or time problems)."""
    if isinstance(exc, NotImplementedError):
        return True
    status = getattr(exc, "status_code", None)
    if status in (400, 422):
        return True
    if status in (500, 501):
        message = str(getattr(exc, "message", "") or exc).lower()
        return any(word in message for word in _FORMAT_WORDS)
    return False


def is_timeout(exc: BaseException) -> bool:
    """A model call that ran out of time: retrying would only wait as long again."""
    return isinstance(exc, TimeoutError) or any(
        cls.__name__ in ("APITimeoutError", "TimeoutException") for cls in type(exc).__mro__
    )


def describe_failure(exc: BaseException) -> str | None:
    """One line for a person when `exc` is a failed call to a model server, else None."""
    from langchain_core.exceptions import ModelError

    link: BaseException | None = exc
    while link is not None:  # provider wrappers keep the original as the cause
        if getattr(link, "model_timeout_s", None) is not None:
            return str(link)
        link = link.__cause__
    try:
        import openai
    except ImportError:
        openai = None  # type: ignore[assignment]
    if openai is not None and isinstance(exc, openai.APIStatusError):
        return f"the model server answered HTTP {exc.status_code}: {exc.message}"
    if openai is not None and isinstance(exc, openai.APIConnectionError):
        return f"no answer from the model server at {exc.request.url}: {exc.message}"
    if isinstance(exc, ModelError):
        return f"{type(exc).__name__}: {exc}"
    return None


def _openai_http_clients(timeout_s: float, base_url: str) -> dict[str, Any]:
    """HTTP clients for langchain-openai that turn a timeout into an error the OpenAI client
    does not retry (it retries timeouts, but propagates its own errors at once)."""
    import openai

    where = base_url or "the OpenAI API"

    class ModelServerTimeout(openai.APITimeoutError):
        """No byte from the model server within `model_timeout_s`."""

        model_timeout_s = timeout_s

        def __init__(self, request: Any) -> None:
            openai.APIConnectionError.__init__(
                self,
                message=f"The model server at {where} sent nothing for {timeout_s:g} s "
                "(model_timeout_s); it may be overloaded or hung. Timeouts are not retried.",
                request=request,
            )

    def timed_out(exc: BaseException) -> bool:
        return any(cls.__name__ == "TimeoutException" for cls in type(exc).__mro__)

    class Client(openai.DefaultHttpxClient):
        def send(self, request: Any, **kwargs: Any) -> Any:
            try:
                return super().send(request, **kwargs)
            except Exception as exc:
                if timed_out(exc):
                    raise ModelServerTimeout(request) from exc
                raise

    class AsyncClient(openai.DefaultAsyncHttpxClient):
        async def send(self, request: Any, **kwargs: Any) -> Any:
            try:
                return await super().send(request, **kwargs)
            except Exception as exc:
                if timed_out(exc):
                    raise ModelServerTimeout(request) from exc
                raise

    return {
        "http_client": Client(timeout=timeout_s),
        "http_async_client": AsyncClient(timeout=timeout_s),
    }


class ChatModels:
    """The chat models of one graph: the one given to the factory, or built from the context
    (one per output budget), plus what each endpoint was found to accept."""

    def __init__(self, fixed: BaseChatModel | None = None) -> None:
        self._fixed = fixed
        self._built: dict[tuple[Any, ...], BaseChatModel] = {}
        self._structured_method: dict[str, StructuredMethod] = {}
        self._refused: dict[ToolRequest, set[str]] = {"named": set(), "offered": set()}
        self._lock = threading.Lock()

    def get(self, context: Context, role: Role = "internal") -> BaseChatModel | None:
        """The model for a call of this role; None means the offline path."""
        if self._fixed is not None:
            return self._fixed
        if not context.model:
            return None
        return self._build(context, role, retries=True)

    def _build(self, context: Context, role: Role, *, retries: bool) -> BaseChatModel:
        max_tokens = context.max_answer_tokens if role == "answer" else context.max_internal_tokens
        key = (
            context.model,
            context.model_base_url,
            context.model_timeout_s,
            context.model_max_retries if retries else 0,
            role,
            max_tokens,
        )
        with self._lock:
            if key not in self._built:
                self._built[key] = self._init(context, role, max_tokens, retries=retries)
            return self._built[key]

    @staticmethod
    def _init(context: Context, role: Role, max_tokens: int, *, retries: bool) -> BaseChatModel:
        from footnote.models.providers import init_chat, resolve

        spec, provider = resolve(context.model, "chat")
        kwargs: dict[str, Any] = budget_kwargs(context, max_tokens)
        if context.model_base_url:
            kwargs["base_url"] = context.model_base_url
        if provider in _CLIENT_KWARGS_PROVIDERS:
            kwargs["timeout"] = context.model_timeout_s
            kwargs["max_retries"] = context.model_max_retries if retries else 0
        if provider == "openai":
            kwargs.update(_openai_http_clients(context.model_timeout_s, context.model_base_url))
            if context.model_base_url and not os.environ.get("OPENAI_API_KEY"):
                # A local OpenAI-compatible server (llama.cpp, vLLM, LM Studio) needs no key,
                # but the client refuses to start without one.
                kwargs["api_key"] = "no-key-for-local-server"
            if role == "answer":
                # The answer streams even when nobody watches: the timeout then bounds the gap
                # between tokens, not the whole answer, which a slow local model needs.
                kwargs["streaming"] = True
        elif provider == "ollama":
            kwargs["client_kwargs"] = {"timeout": context.model_timeout_s}
        if role == "internal":
            # Nobody reads an internal call's tokens, and a streamed tool call is only as
            # good as the server's deltas: llama.cpp repeats the function name in every
            # chunk, which merges into "search_documentssearch_documents...".
            kwargs["disable_streaming"] = True
        return init_chat(spec, **kwargs)

    def _model_key(self, context: Context) -> str:
        return "fixed" if self._fixed is not None else f"{context.model}@{context.model_base_url}"

    def structured_method(self, context: Context) -> StructuredMethod | None:
        """The structured-output method this model was found to accept, if any yet."""
        return self._structured_method.get(self._model_key(context))

    def structured(
        self,
        context: Context,
        schema: type[SchemaT],
        prompt: str,
        config: RunnableConfig,
    ) -> tuple[SchemaT, StructuredMethod]:
        """`schema` filled in by the model, and the method that got it.

        Raises what the model call raised (after retries) unless it was a format rejection;
        StructuredOutputUnsupported when every method was rejected.
        """
        key = self._model_key(context)
        known = self._structured_method.get(key)
        if known is not None:
            model = self._require(context)
            return self._structured_call(model, known, schema, prompt, context, config), known
        rejected: list[str] = []
        for method in STRUCTURED_METHODS:
            try:
                result = self._on_trial(
                    context,
                    lambda m, method=method: self._structured_call(  # type: ignore[misc]
                        m, method, schema, prompt, context, config
                    ),
                )
            except Exception as exc:
                if not is_format_rejection(exc):
                    raise
                rejected.append(f"{method}: {type(exc).__name__}")
                continue
            with self._lock:
                self._structured_method[key] = method
            return result, method
        raise StructuredOutputUnsupported(
            "the model server rejected every structured-output method (" + "; ".join(rejected) + ")"
        )

    def call_tool(
        self, context: Context, tool: BaseTool, messages: list[BaseMessage], config: RunnableConfig
    ) -> tuple[BaseMessage | None, ToolRequest]:
        """The model's reply when offered `tool`, and how the tool was requested.

        The tool is named in `tool_choice` unless this model was found not to accept that
        (servers that reject it answer 400, which the client does not retry); a server that
        rejects tools altogether gets no tool request again, and the reply is None.
        """
        model = self._require(context)
        key = self._model_key(context)
        attempts: list[tuple[ToolRequest, Callable[[], Runnable[Any, Any]]]] = [
            ("named", lambda: _bind_tool_by_name(model, tool)),
            ("offered", lambda: model.bind_tools([tool])),
        ]
        for how, bind in attempts:
            if key in self._refused[how]:
                continue
            try:
                return bind().invoke(messages, config=config), how
            except Exception as exc:
                if not is_format_rejection(exc):
                    raise
                with self._lock:
                    self._refused[how].add(key)
        return None, "refused"

    def _require(self, context: Context) -> BaseChatModel:
        model = self.get(context, "internal")
        if model is None:
            raise ValueError("this call needs a chat model")
        return model

    def _on_trial(self, context: Context, call: Callable[[BaseChatModel], T]) -> T:
        """Run `call` with a request shape not yet known to work for this model.

        It is sent once, without client retries, so a request the server rejects as malformed
        is not repeated; a transient failure (not a timeout) is then retried as usual.
        """
        model = self._require(context)
        if self._fixed is not None:
            return call(model)
        trial = self._build(context, "internal", retries=False)
        try:
            return call(trial)
        except Exception as exc:
            if is_format_rejection(exc) or is_timeout(exc) or context.model_max_retries <= 0:
                raise
        return call(model)

    def _structured_call(
        self,
        model: BaseChatModel,
        method: StructuredMethod,
        schema: type[SchemaT],
        prompt: str,
        context: Context,
        config: RunnableConfig,
    ) -> SchemaT:
        runnable, text = _structured_runnable(model, method, schema, prompt, context)
        metadata = {**(config.get("metadata") or {}), "structured_output": method}
        result = runnable.invoke(text, config={**config, "metadata": metadata})
        if not isinstance(result, schema):
            raise ValueError(f"expected {schema.__name__}, got {type(result).__name__}")
        return result


def _structured_runnable(
    model: BaseChatModel,
    method: StructuredMethod,
    schema: type[BaseModel],
    prompt: str,
    context: Context,
) -> tuple[Runnable[Any, Any], str]:
    """The runnable for one method and the prompt it needs; NotImplementedError when the
    model's client cannot express the method at all (a rejection without a request)."""
    if method != "json_mode":
        return _with_method(model, schema, method), prompt
    text = prompt + prompts.JSON_MODE_INSTRUCTIONS.format(
        schema=json.dumps(schema.model_json_schema())
    )
    if not _is_openai_client(model):
        return _with_method(model, schema, method), text
    response_format: dict[str, Any] = {"type": "json_object"}
    if context.model_base_url:
        # llama.cpp and vLLM constrain JSON mode to a schema given here.
        response_format["schema"] = schema.model_json_schema()
    parser = PydanticOutputParser(pydantic_object=schema)
    return model.bind(response_format=response_format) | parser, text


def _bind_tool_by_name(model: BaseChatModel, tool: BaseTool) -> Runnable[Any, Any]:
    try:
        return model.bind_tools([tool], tool_choice=tool.name)
    except (TypeError, ValueError) as exc:
        raise NotImplementedError(f"{type(model).__name__} takes no tool_choice") from exc


def _is_openai_client(model: BaseChatModel) -> bool:
    try:
        from langchain_openai.chat_models.base import BaseChatOpenAI
    except ImportError:
        return False
    return isinstance(model, BaseChatOpenAI)


def _with_method(
    model: BaseChatModel, schema: type[BaseModel], method: StructuredMethod
) -> Runnable[Any, Any]:
    try:
        return model.with_structured_output(schema, method=method)
    except (TypeError, ValueError, NotImplementedError) as exc:
        # The base implementation takes no method and always uses tool calling.
        if method == "function_calling":
            return model.with_structured_output(schema)
        raise NotImplementedError(f"{type(model).__name__} cannot use {method}") from exc
