"""Metrics and tracing on the production runtime, each the operator's switch: metrics off by
default (404), on with `--metrics` / $FOOTNOTE_METRICS=1 and then for admins only, counting
runs, latencies, errors and ingest jobs with fixed label words (no question, title, user or
index name in them); tracing (LangSmith and Aegra's OpenTelemetry exporters) off unless
`--tracing`. The served side (a deployment with metrics on) is in
tests/test_production_doors.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from starlette.applications import Starlette
from starlette.routing import Route
from starlette.testclient import TestClient

from footnote.server import metrics
from footnote.server.production import replica_environment


def test_tracing_is_one_switch_for_langsmith_and_opentelemetry(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("LANGSMITH_API_KEY", "lsv2-not-a-real-key")
    monkeypatch.setenv("OTEL_TARGETS", "OTLP")

    def env(tracing: bool) -> dict[str, str]:
        return replica_environment(
            index_dir=str(tmp_path), database_url="postgresql://x", redis_url="redis://x",
            config=tmp_path / "aegra.json", host="127.0.0.1", port=1, migrate=False,
            tracing=tracing,
        )  # fmt: skip

    off, on = env(False), env(True)
    assert off["LANGSMITH_TRACING"] == "false" and "LANGSMITH_API_KEY" not in off
    assert off["OTEL_TARGETS"] == ""
    assert on["LANGSMITH_TRACING"] == "true" and on["LANGSMITH_API_KEY"] == "lsv2-not-a-real-key"
    assert on["OTEL_TARGETS"] == "OTLP"
    assert off["ENABLE_PROMETHEUS_METRICS"] == "false"  # Aegra's own: Footnote's are served


def test_metrics_labels_are_fixed_words_whatever_a_caller_sends(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    hostile = "Payroll <script> alice@example.com /etc/passwd"
    metrics.observe_run(hostile, "wait", hostile, 200, 0.5)
    metrics.observe_run("indexer", "stream", hostile, 403, 0.01)
    page = TestClient(Starlette(routes=[Route("/metrics", metrics.metrics_page)]))
    monkeypatch.delenv(metrics.METRICS_ENV, raising=False)
    assert page.get("/metrics").status_code == 404
    monkeypatch.setenv(metrics.METRICS_ENV, "1")
    text = page.get("/metrics").text
    assert 'footnote_runs_total{graph="other",outcome="ok",route="wait"}' in text
    assert 'footnote_ingest_jobs_total{action="other",outcome="refused"}' in text
    for piece in ("Payroll", "script", "alice", "passwd"):
        assert piece not in text
