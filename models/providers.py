"""Provider model strings, and every way a provider can fail, said in one line.

Chat models (tools, graph) and embeddings (ingest, retrieval) are both named by
`provider:model` strings for LangChain's `init_chat_model` / `init_embeddings`. This is their
one home, below both users: the spelling the LangGraph templates use (`provider/model`) is
accepted too, and a missing package, an unknown spelling or an unreachable server becomes a
`ProviderProblem` whose message is one line saying what to do. The command line prints that
line (the traceback only with `--debug`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from langchain_core.embeddings import Embeddings
    from langchain_core.language_models import BaseChatModel

Kind = Literal["chat", "embeddings"]

EXTRAS = {
    "openai": "openai",
    "azure_openai": "openai",
    "anthropic": "anthropic",
    "ollama": "ollama",
}
"""Providers whose package comes with one of Footnote's extras (pyproject.toml)."""

EXAMPLES = {
    "chat": "openai:gpt-4.1-mini or anthropic/claude-sonnet-4-5",
    "embeddings": "openai:text-embedding-3-small or ollama/nomic-embed-text",
}


class ProviderProblem(ValueError):
    """A provider model that cannot be used; the message is one line saying what to do."""


class ProviderUnreachable(ProviderProblem):
    """A provider's server could not be reached; the message says which model and where."""


def _registry(kind: Kind) -> dict[str, tuple[Any, ...]]:
    """LangChain's own table of providers: name -> (module, class, creator)."""
    if kind == "chat":
        from langchain.chat_models import base as chat_base

        return dict(chat_base._BUILTIN_PROVIDERS)
    from langchain.embeddings import base as embeddings_base

    return dict(embeddings_base._BUILTIN_PROVIDERS)


def normalize_spec(spec: str, kind: Kind) -> str:
    """`provider/model` (the LangGraph templates' spelling) as `provider:model`; any other
    string unchanged. `openai:meta-llama/Llama-3` keeps its slash: the prefix decides."""
    providers = _registry(kind)
    head, colon, _ = spec.partition(":")
    if colon and head.strip().lower() in providers:
        return spec
    head, slash, rest = spec.partition("/")
    if slash and head.strip().replace("-", "_").lower() in providers:
        return f"{head.strip().replace('-', '_').lower()}:{rest}"
    return spec


def provider_name(spec: str, kind: Kind) -> str:
    """The provider a (normalised) string names, inferred as LangChain would; ProviderProblem
    when it names none."""
    providers = _registry(kind)
    head, colon, _ = spec.partition(":")
    if colon and head.strip().lower() in providers:
        return head.strip().lower()
    if kind == "chat":
        from langchain.chat_models import base as chat_base

        inferred = chat_base._attempt_infer_model_provider(spec)
        if inferred in providers:
            return str(inferred)
    raise ProviderProblem(unknown_spelling(spec, kind))


def unknown_spelling(spec: str, kind: Kind) -> str:
    what = "chat model" if kind == "chat" else "embeddings"
    providers = ", ".join(sorted(_registry(kind)))
    return (
        f"unknown {what} {spec!r}: write provider:model or provider/model, e.g. "
        f"{EXAMPLES[kind]} (providers: {providers})"
    )


def install_hint(extra: str) -> str:
    """The pip command that installs one of Footnote's extras (kept in the store layer, which
    names the postgres extra when a `postgresql://` index has no driver)."""
    from footnote.store.extras import install_command

    return install_command(extra)


def missing_package(spec: str, provider: str, kind: Kind) -> str:
    module = str(_registry(kind)[provider][0])
    package = module.split(".", 1)[0].replace("_", "-")
    extra = EXTRAS.get(provider)
    install = install_hint(extra) if extra else f"pip install {package}"
    what = "chat model" if kind == "chat" else "embeddings"
    return f"the {what} {spec!r} needs the {package} package: {install}"


def resolve(spec: str, kind: Kind) -> tuple[str, str]:
    """(`provider:model`, provider) for a model string whose provider's package can be
    imported; a one-line ProviderProblem otherwise. Call it before any provider-specific
    set-up, which may import the provider's own client."""
    import importlib

    spec = normalize_spec(spec, kind)
    provider = provider_name(spec, kind)
    try:
        importlib.import_module(str(_registry(kind)[provider][0]))
    except ImportError as exc:
        raise ProviderProblem(missing_package(spec, provider, kind)) from exc
    return spec, provider


def init_chat(spec: str, **kwargs: Any) -> BaseChatModel:
    """`init_chat_model` for a `provider:model` or `provider/model` string, failing with a
    one-line ProviderProblem when the string or the provider's package is wrong."""
    from langchain.chat_models import init_chat_model

    spec, provider = resolve(spec, "chat")
    try:
        return init_chat_model(spec, **kwargs)
    except ImportError as exc:
        raise ProviderProblem(missing_package(spec, provider, "chat")) from exc
    except Exception as exc:  # a constructor refusing its settings (e.g. no API key)
        raise ProviderProblem(f"cannot start the chat model {spec!r}: {first_line(exc)}") from exc


def init_provider_embeddings(spec: str, **kwargs: Any) -> Embeddings:
    """`init_embeddings` for a `provider:model` or `provider/model` string, with the same
    one-line failures as `init_chat`."""
    from langchain.embeddings import init_embeddings

    spec, provider = resolve(spec, "embeddings")
    try:
        return init_embeddings(spec, **kwargs)
    except ImportError as exc:
        raise ProviderProblem(missing_package(spec, provider, "embeddings")) from exc
    except Exception as exc:
        raise ProviderProblem(f"cannot start the embeddings {spec!r}: {first_line(exc)}") from exc


def first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


_CONNECTION_ERRORS = {
    "ConnectionError",  # builtin and requests
    "ConnectError",  # httpx
    "ConnectTimeout",
    "APIConnectionError",  # openai, anthropic
    "NewConnectionError",  # urllib3
    "MaxRetryError",
    "gaierror",
}


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    link: BaseException | None = exc
    while link is not None and id(link) not in seen:
        seen.add(id(link))
        yield link
        link = link.__cause__ or link.__context__


def _url_of(exc: BaseException) -> str:
    """The URL a client error was about, where the client says (httpx raises on a missing
    request, so every look-up is guarded)."""
    try:
        request = getattr(exc, "request", None)
    except RuntimeError:
        request = None
    url = getattr(request, "url", None) if request is not None else None
    if url is None:
        url = getattr(exc, "url", None)
    return str(url) if url else ""


def describe_unreachable(exc: BaseException) -> str | None:
    """'could not reach URL: reason' when a provider's server could not be reached, else None."""
    links = list(_chain(exc))
    if not any(cls.__name__ in _CONNECTION_ERRORS for link in links for cls in type(link).__mro__):
        return None
    where = next((url for url in map(_url_of, links) if url), "the provider's server")
    reason = first_line(links[-1])
    return f"could not reach {where}: {reason}"
