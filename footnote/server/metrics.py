"""Prometheus metrics of the production runtime, off unless the operator turns them on
(`footnote serve --production --metrics`, i.e. $FOOTNOTE_METRICS=1).

    footnote_runs_total{graph, route, outcome}     runs asked for, by graph (footnote,
                                                   indexer, library, other), route (wait,
                                                   stream, background) and outcome (ok,
                                                   refused: a 4xx, error: a 5xx)
    footnote_run_seconds{graph, route}             how long the request took (for wait and
                                                   stream: the run's latency)
    footnote_ingest_jobs_total{action, outcome}    indexer runs (add, remove, sync, sources)

Served at GET /metrics on each replica, to admins only (`footnote.server.aegra_app.
AdminOnlyMeta`: a scraper sends an admin's key, e.g. Prometheus' `authorization`
setting): counts of who uses the server how, and when, are the operator's business, not any
signed-in caller's. Off, the route answers 404. Labels are fixed words only: no question,
answer, title, user or index name ever becomes a label, so nothing a caller sends reaches it.

A run that fails after its stream has begun still answered 200: it counts as `ok` here, and
its error is in the run's own record.
"""

from __future__ import annotations

import os
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
)
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from footnote.server.production import METRICS_ENV

GRAPHS = ("footnote", "indexer", "library")
ACTIONS = ("add", "remove", "sync", "sources")

REGISTRY = CollectorRegistry(auto_describe=True)
"""Footnote's own: nothing another library registers globally is served with it."""
RUNS = Counter("footnote_runs", "Runs asked for", ("graph", "route", "outcome"), registry=REGISTRY)
RUN_SECONDS = Histogram(
    "footnote_run_seconds",
    "Seconds from a run request to the end of its response",
    ("graph", "route"),
    buckets=(0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 900),
    registry=REGISTRY,
)
INGEST_JOBS = Counter(
    "footnote_ingest_jobs", "Indexer runs", ("action", "outcome"), registry=REGISTRY
)


def enabled() -> bool:
    return os.environ.get(METRICS_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def outcome(status: int) -> str:
    return "ok" if status < 400 else "refused" if status < 500 else "error"


def observe_run(graph: str, route: str, action: Any, status: int, seconds: float) -> None:
    """One run request: `graph` and `action` as the caller sent them, mapped onto the fixed
    label words (anything else is `other`)."""
    graph = graph if graph in GRAPHS else "other"
    result = outcome(status)
    RUNS.labels(graph, route, result).inc()
    RUN_SECONDS.labels(graph, route).observe(seconds)
    if graph == "indexer":
        INGEST_JOBS.labels(action if action in ACTIONS else "other", result).inc()


async def metrics_page(request: Request) -> Response:
    if not enabled():
        return JSONResponse({"detail": "Not Found"}, status_code=404)
    return Response(generate_latest(REGISTRY), media_type=CONTENT_TYPE_LATEST)
