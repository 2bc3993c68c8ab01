"""Which embeddings an index is built and searched with: a name or any LangChain `Embeddings`
object, and the record that lets an index reload its provider model without the flag.

`embeddings=` takes, everywhere (ingest, `FootnoteRetriever`, the graph's context): "" (the
model the index was built with), a `provider:model` / `provider/model` string for
`init_embeddings`, `footnote:minilm-l6-v2-int8` (Footnote's own offline model, which
`init_embeddings` does not know: `load_embeddings` does), or an `Embeddings` object.

The manifest records the model as a string (`provider:model` where the object says its
provider and model) and its dimension. A manifest is a file anyone who can write the index can
edit, so the provider it names is not loaded on its word alone (docs/integrity.md). Instead,
`footnote ingest` also notes, in the user's own state folder, which provider model built which
index; searching that index then reloads that model by itself. A copied or edited index still
needs `--embeddings`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from langchain_core.embeddings import Embeddings

from footnote.models.embeddings import (
    DEFAULT_EMBEDDINGS,
    IndexEmbeddings,
    MiniLMEmbeddings,
    ProviderEmbeddings,
    load_embeddings,
)
from footnote.models.providers import ProviderProblem
from footnote.store.private import private_dir, state_dir, write_private_text
from footnote.store.types import IndexMismatch

EmbeddingsSetting = str | Embeddings
"""What `embeddings=` accepts: a model string or a LangChain `Embeddings` object."""

RECORD_FILE = "index-embeddings.json"


def embeddings_id(model: Embeddings) -> str:
    """The string an index records for an `Embeddings` object: `provider:model` when the
    object is a class LangChain's `init_embeddings` builds (so it reloads), else its class
    path and model name (checked against the index, never loaded from it)."""
    if isinstance(model, MiniLMEmbeddings | ProviderEmbeddings):
        return model.model_id
    from langchain.embeddings import base

    cls = type(model)
    name = next(
        (
            getattr(model, attribute)
            for attribute in ("model", "model_name", "model_id")
            if isinstance(getattr(model, attribute, None), str)
        ),
        "",
    )
    root = cls.__module__.split(".", 1)[0]
    for provider, (module, class_name, _) in base._BUILTIN_PROVIDERS.items():
        if class_name == cls.__name__ and module.split(".", 1)[0] == root and name:
            return f"{provider}:{name}"
    path = f"{cls.__module__}.{cls.__qualname__}"
    return f"{path}:{name}" if name else path


def as_index_embeddings(value: EmbeddingsSetting | None) -> IndexEmbeddings:
    """The model for a setting: a string is loaded (empty: the offline default), an object is
    used as it is, given the array API the index needs."""
    if value is None or isinstance(value, str):
        return load_embeddings(value or "")
    if isinstance(value, MiniLMEmbeddings | ProviderEmbeddings):
        return value
    if isinstance(value, Embeddings):
        return ProviderEmbeddings(embeddings_id(value), value)
    raise ProviderProblem(
        f"embeddings must be a 'provider:model' string or a LangChain Embeddings object, "
        f"not {type(value).__name__}"
    )


def check_setting(value: Any) -> EmbeddingsSetting:
    """A context's or a caller's `embeddings` value, refused in one line when it is neither a
    string nor an `Embeddings` object (for validating settings before any search)."""
    if isinstance(value, str | Embeddings):
        return value
    raise ProviderProblem(
        f"embeddings must be a 'provider:model' string or a LangChain Embeddings object, "
        f"not {type(value).__name__}"
    )


def setting_key(value: EmbeddingsSetting | None) -> str:
    """A cache key for a setting: the string itself, or the object's identity (whoever
    caches by it keeps the object alive, so the identity is not reused meanwhile)."""
    if value is None or isinstance(value, str):
        return value or ""
    return f"object:{id(value)}"


def embeddings_for_index(
    requested: EmbeddingsSetting | None, built_with: str, location: str = ""
) -> IndexEmbeddings:
    """The model to search an index with: the one asked for (the caller then checks it against
    the manifest), else the packaged default or the provider model this user built the index
    with (`remembered`); any other must be asked for, never picked by a file."""
    if requested:
        return as_index_embeddings(requested)
    if built_with == DEFAULT_EMBEDDINGS:
        return load_embeddings("")
    if location and remembered(location) == built_with:
        return load_embeddings(built_with)
    raise IndexMismatch(
        f"the index was built with embeddings {built_with[:80]!r}: pass them explicitly "
        "(--embeddings, or the `embeddings` setting) to load that model"
    )


def _record_path() -> Path:
    return state_dir() / RECORD_FILE


def record_key(location: str | Path) -> str:
    """An index's name in the record: its absolute path, or its URL without a password."""
    text = str(location)
    if "://" not in text:
        return str(Path(text).resolve())
    parts = urlsplit(text)
    host = parts.hostname or ""
    user = f"{parts.username}@" if parts.username else ""
    port = f":{parts.port}" if parts.port else ""
    return urlunsplit((parts.scheme, f"{user}{host}{port}", parts.path, parts.query, ""))


def _read_record() -> dict[str, str]:
    try:
        data = json.loads(_record_path().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {str(k): v for k, v in data.items() if isinstance(v, str)}


def remembered(location: str | Path) -> str:
    """The provider model this user last built the index at `location` with ('' if none)."""
    return _read_record().get(record_key(location), "")


def remember(location: str | Path, model_id: str) -> None:
    """Note that `model_id` built the index at `location`, when it is a string that reloads
    (the default needs no note; an object's class path cannot be loaded from a name)."""
    key = record_key(location)
    record = _read_record()
    reloadable = (
        ":" in model_id
        and model_id != DEFAULT_EMBEDDINGS
        and "." not in (model_id.split(":", 1)[0])
    )
    if record.get(key) == (model_id if reloadable else None):
        return
    if reloadable:
        record[key] = model_id
    else:
        record.pop(key, None)
    path = _record_path()
    try:
        private_dir(path.parent)  # the state folder: chats, logs, queues; names of indexes
        scratch = path.with_name(f".{path.name}.{os.getpid()}")
        write_private_text(scratch, json.dumps(record, indent=2, sort_keys=True))
        os.replace(scratch, path)
    except OSError:
        pass  # the record only saves a flag: without it, --embeddings is asked for
