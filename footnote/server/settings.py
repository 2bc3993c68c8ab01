"""Server-owned settings: what a served caller may choose, and what only the operator sets.

Served (over HTTP), the operator fixes the index locations, the model, its base URL, the
embeddings and the prompts through the environment; a caller may pick an index *by name*, a
model from the operator's allowlist, and tune retrieval within bounds. Anything else in a run's
context is refused with a 4xx, never coerced. Embedded use (a host compiling the graph in its
own process) does not come through here: the host is the trusted party and sets the context.

    FOOTNOTE_INDEX            the default index (a directory or a postgresql:// URL)
    FOOTNOTE_INDEXES          JSON object, name -> directory or postgresql:// URL
    FOOTNOTE_MODEL            the chat model ('provider:model'; empty: offline extractive)
    FOOTNOTE_MODELS           comma-separated models a caller may choose instead
    FOOTNOTE_MODEL_BASE_URL   base URL of an OpenAI-compatible server for the model
    FOOTNOTE_EMBEDDINGS       embeddings override (empty: the index's own model)
    FOOTNOTE_SYSTEM_PROMPT    answer instructions (empty: the built-in prompt)
    FOOTNOTE_WEB_SEARCH       "allow": callers may turn web search on (needs TAVILY_API_KEY)
    FOOTNOTE_WEBHOOKS         comma-separated http(s) origins a run's `webhook` may call
                              (empty: webhooks are refused)
    FOOTNOTE_SEARCH_STAGE     the ranking served searches and answers use: `pipeline`
                              (default) or `graph` (the entity-graph walk); callers may not
                              choose it
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from footnote.graph.context import SEARCH_STAGES, Context
from footnote.graph.grader_choice import OFFLINE_GRADERS
from footnote.store import jsonfile
from footnote.store.backends import is_postgres, resolve_index

DEFAULT_INDEX_NAME = "default"
_INDEX_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")

IDENTITY_FIELDS = ("user_groups", "strict_groups", "admin")
"""Who is asking: served, these come from the caller's credentials, never from the request."""

TUNABLE_BOUNDS: dict[str, tuple[type, float, float]] = {
    "retrieve_k": (int, 1, 50),
    "keep_k": (int, 1, 20),
    "max_retrieval_attempts": (int, 1, 5),
    "grade_threshold": (float, 0.0, 1.0),
}
"""Retrieval knobs a caller may set, with their type and inclusive bounds."""

CALLER_SWITCHES = ("hyde",)
"""Booleans a caller may set freely."""

CALLER_CHOICES: dict[str, tuple[str, ...]] = {"offline_grader": OFFLINE_GRADERS}
"""Settings a caller may pick from a fixed list."""


class SettingsError(ValueError):
    """The operator's server settings are unusable; the server must not start."""


class ContextRefused(Exception):
    """A run or assistant context a served caller may not use: an HTTP status and a reason."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True)
class ServerSettings:
    """The operator's choices, read once when the server starts."""

    indexes: dict[str, str]
    """Index name -> location (an absolute directory or a postgresql:// URL)."""
    model: str = ""
    models: tuple[str, ...] = ()
    """Models a caller may choose besides `model`."""
    model_base_url: str = ""
    embeddings: str = ""
    system_prompt: str = field(default_factory=lambda: _context_default("system_prompt"))
    web_search_allowed: bool = False
    webhooks: tuple[str, ...] = ()
    """Origins (`https://host[:port]`) a run's webhook may call; empty: none."""
    search_stage: str = "pipeline"
    """The ranking of every served search (runs, MCP, chat completions). The operator's
    alone: the graph walk reads only what a caller may read, but a server that measured one
    ranking is not re-ranked by its callers."""

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> ServerSettings:
        env = os.environ if env is None else env
        indexes = {DEFAULT_INDEX_NAME: _location(resolve_index(env=env))}
        raw = env.get("FOOTNOTE_INDEXES", "").strip()
        if raw:
            try:
                named = jsonfile.loads(raw)
            except ValueError as exc:
                raise SettingsError(f"FOOTNOTE_INDEXES: not valid JSON ({exc})") from None
            if not isinstance(named, dict):
                raise SettingsError("FOOTNOTE_INDEXES: expected a JSON object, name -> location")
            for name, location in named.items():
                if name == DEFAULT_INDEX_NAME:
                    raise SettingsError(
                        "FOOTNOTE_INDEXES: 'default' is FOOTNOTE_INDEX; choose another name"
                    )
                if not _INDEX_NAME.fullmatch(name):
                    raise SettingsError(
                        f"FOOTNOTE_INDEXES: index name {name!r} must be letters, digits, "
                        "'.', '_' or '-' (at most 64)"
                    )
                if not isinstance(location, str) or not location.strip():
                    raise SettingsError(
                        f"FOOTNOTE_INDEXES: {name!r} must map to a directory or a postgresql:// URL"
                    )
                indexes[name] = _location(location)
        web = env.get("FOOTNOTE_WEB_SEARCH", "").strip().lower()
        if web not in ("", "allow", "off"):
            raise SettingsError("FOOTNOTE_WEB_SEARCH must be 'allow' or 'off'")
        model = env.get("FOOTNOTE_MODEL", "").strip()
        stage = env.get("FOOTNOTE_SEARCH_STAGE", "").strip() or "pipeline"
        if stage not in SEARCH_STAGES:
            raise SettingsError(f"FOOTNOTE_SEARCH_STAGE must be one of {', '.join(SEARCH_STAGES)}")
        return cls(
            indexes=indexes,
            model=model,
            models=tuple(
                m for m in (s.strip() for s in env.get("FOOTNOTE_MODELS", "").split(",")) if m
            ),
            model_base_url=env.get("FOOTNOTE_MODEL_BASE_URL", "").strip(),
            embeddings=env.get("FOOTNOTE_EMBEDDINGS", "").strip(),
            system_prompt=env.get("FOOTNOTE_SYSTEM_PROMPT") or _context_default("system_prompt"),
            web_search_allowed=web == "allow",
            webhooks=_webhook_origins(env.get("FOOTNOTE_WEBHOOKS", "")),
            search_stage=stage,
        )

    def fixed(self) -> dict[str, Any]:
        """The server-owned context fields, as the operator set them: every field of the
        graph's context a caller may not choose, so a new one is pinned until allowed."""
        return {
            **{
                f.name: _context_default(f.name)
                for f in fields(Context)
                if f.name not in _CALLER_FIELDS and f.name not in IDENTITY_FIELDS
            },
            "model": self.model,
            "model_base_url": self.model_base_url,
            "model_timeout_s": _context_default("model_timeout_s"),
            "model_max_retries": _context_default("model_max_retries"),
            "embeddings": self.embeddings,
            "system_prompt": self.system_prompt,
            "index_dir": self.indexes[DEFAULT_INDEX_NAME],
            "web_search": False,
            "search_stage": self.search_stage,
        }

    def check(self, requested: Any) -> dict[str, Any]:
        """The caller's own choices in `requested`, validated; ContextRefused if any is not
        allowed. A field of the graph's context a caller may not choose is refused unless it
        equals the operator's value; names the graph does not know are dropped."""
        if requested is None:
            return {}
        if not isinstance(requested, dict):
            raise ContextRefused(422, "context must be a JSON object")
        chosen: dict[str, Any] = {}
        fixed = self.fixed()
        for name, value in requested.items():
            if name in IDENTITY_FIELDS:
                raise ContextRefused(
                    403,
                    f"context field {name!r} is not accepted: who you are and what you may "
                    "see come from your credentials",
                )
            if name in TUNABLE_BOUNDS:
                chosen[name] = _bounded(name, value, *TUNABLE_BOUNDS[name])
            elif name in CALLER_SWITCHES:
                chosen[name] = _boolean(name, value)
            elif name in CALLER_CHOICES:
                if not isinstance(value, str) or value not in CALLER_CHOICES[name]:
                    options = ", ".join(CALLER_CHOICES[name])
                    raise ContextRefused(422, f"context field {name!r} must be one of: {options}")
                chosen[name] = value
            elif name == "web_search":
                if _boolean(name, value) and not self.web_search_allowed:
                    raise ContextRefused(403, "web search is not enabled on this server")
                chosen[name] = value
            elif name == "index_dir":
                chosen[name] = self.index_location(value)
            elif name == "model":
                chosen[name] = self.model_choice(value)
            elif name in fixed:
                if not isinstance(value, type(fixed[name])) or isinstance(
                    value, bool
                ) != isinstance(fixed[name], bool):
                    raise ContextRefused(
                        422, f"context field {name!r} must be {_kind(fixed[name])}"
                    )
                if value != fixed[name]:
                    raise ContextRefused(
                        403, f"context field {name!r} is set by the server's operator"
                    )
        return chosen

    def run_context(self, requested: Any) -> dict[str, Any]:
        """The context a served run gets: every server-owned field pinned to the operator's
        value (so nothing stored elsewhere can override it), plus the caller's valid choices."""
        return {**self.fixed(), **self.check(requested)}

    def webhook(self, value: Any) -> None:
        """ContextRefused unless `value` (a run's webhook) is empty or on the allowlist."""
        if value is None or value == "":
            return
        if not self.webhooks:
            raise ContextRefused(403, "webhooks are not enabled on this server")
        if not isinstance(value, str) or _origin(value) not in self.webhooks:
            raise ContextRefused(403, "this webhook's host is not on the server's allowlist")

    def index_location(self, value: Any) -> str:
        if not isinstance(value, str):
            raise ContextRefused(422, "context field 'index_dir' must be an index name")
        if value in self.indexes:
            return self.indexes[value]
        if value in self.indexes.values():  # the operator's own location (Studio echoes it)
            return value
        names = ", ".join(sorted(self.indexes))
        if is_postgres(value) or "/" in value or "\\" in value or value.startswith("."):
            raise ContextRefused(
                403,
                f"index_dir takes an index name ({names}); paths and URLs are not accepted "
                "from callers",
            )
        raise ContextRefused(404, f"no index named {_shown(value)}; this server has: {names}")

    def model_choice(self, value: Any) -> str:
        if not isinstance(value, str):
            raise ContextRefused(422, "context field 'model' must be a string")
        if value == self.model or value in self.models:
            return value
        allowed = ", ".join(repr(m) for m in (self.model, *self.models))
        raise ContextRefused(
            403, f"model {_shown(value)} is not offered here; choose one of {allowed}"
        )


_CALLER_FIELDS = frozenset(
    {*TUNABLE_BOUNDS, *CALLER_SWITCHES, *CALLER_CHOICES, "index_dir", "model", "web_search"}
)


def _origin(url: str) -> str:
    """`scheme://host[:port]` of an http(s) URL without user info; "" if it is not one."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:
        return ""
    if parts.scheme not in ("http", "https") or not parts.hostname or "@" in parts.netloc:
        return ""
    return f"{parts.scheme}://{parts.hostname}" + (f":{port}" if port is not None else "")


def _webhook_origins(raw: str) -> tuple[str, ...]:
    origins = []
    for entry in (e.strip() for e in raw.split(",")):
        if not entry:
            continue
        origin = _origin(entry)
        if not origin or urlsplit(entry).path.strip("/") or urlsplit(entry).query:
            raise SettingsError(
                f"FOOTNOTE_WEBHOOKS: {_shown(entry)} must be an http(s) origin such as "
                "https://hooks.example.com (no path, no user info)"
            )
        origins.append(origin)
    return tuple(origins)


def _context_default(name: str) -> Any:
    return getattr(Context(), name)


def _location(value: str) -> str:
    value = value.strip()
    return value if is_postgres(value) else str(Path(value).resolve())


def _kind(value: Any) -> str:
    return {bool: "true or false", int: "an integer", float: "a number", str: "a string"}.get(
        type(value), type(value).__name__
    )


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _boolean(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ContextRefused(
            422, f"context field {name!r} must be true or false, not {_shown(value)}"
        )
    return value


def _bounded(name: str, value: Any, kind: type, low: float, high: float) -> Any:
    numeric = isinstance(value, int | float) if kind is float else isinstance(value, int)
    if isinstance(value, bool) or not numeric:
        raise ContextRefused(
            422, f"context field {name!r} must be {_kind(kind(0))}, not {_shown(value)}"
        )
    if not low <= value <= high:
        raise ContextRefused(422, f"context field {name!r} must be between {low:g} and {high:g}")
    return value
