"""Fast paths load only what they use: the timing itself is measured by benchmarks/startup.py,
outside the test run; these check the lazy imports it depends on."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

HEAVY = ["faiss", "bm25s", "onnxruntime", "langchain_text_splitters", "langgraph"]


def loaded_after(code: str) -> list[str]:
    probe = (
        f"{code}\nimport json, sys\nprint(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=300
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_cli_parser_loads_no_search_or_model_code() -> None:
    assert loaded_after("from footnote.cli.main import build_parser; build_parser()") == []


def test_ingest_with_nothing_to_do_reads_no_vectors_and_no_model(
    handbook_dir: Path, tmp_path: Path
) -> None:
    index = tmp_path / "index"
    build = (
        "from footnote.ingest.pipeline import ingest\n"
        f"ingest([{str(handbook_dir)!r}], {str(index)!r})"
    )
    assert "faiss" in loaded_after(build), "a first ingest writes vectors"
    again = (
        f"from footnote.ingest.pipeline import ingest\n"
        f"s = ingest([{str(handbook_dir)!r}], {str(index)!r})\n"
        "assert s.embedded_chunks == 0 and s.chunks > 0 and len(s.unchanged) == 9, s"
    )
    assert loaded_after(again) == []
