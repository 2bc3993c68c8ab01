"""The contextual benchmark's list of misses: where each query's answer ranked when it fell
out of the top 10, and what ranked first instead, so a variant's failures can be read."""

from __future__ import annotations

import json
from pathlib import Path

from tests.benchmark_modules import load_benchmark


def test_misses_keep_the_answers_rank_and_what_ranked_instead() -> None:
    contextual = load_benchmark("contextual")
    ranked = {f"p{i}": float(100 - i) for i in range(30)}
    run = {"early": ranked, "late": ranked, "lost": ranked}
    qrels = {"early": {"p3": 1}, "late": {"p14": 1}, "lost": {"elsewhere": 1}}
    assert contextual.misses(run, qrels) == {
        "late": {"rank": 15, "instead": ["p0", "p1", "p2"]},
        "lost": {"rank": None, "instead": ["p0", "p1", "p2"]},
    }


def test_the_misses_report_sets_each_variant_beside_no_context(tmp_path: Path) -> None:
    contextual = load_benchmark("contextual")
    dataset = tmp_path / "tiny"
    (dataset / "qrels").mkdir(parents=True)
    passages = [("pg#a", "Page", "Install it with apt."), ("pg#b", "Page", "Remove it with apt.")]
    (dataset / "corpus.jsonl").write_text(
        "".join(json.dumps({"_id": i, "title": t, "text": x}) + "\n" for i, t, x in passages)
    )
    (dataset / "queries.jsonl").write_text(json.dumps({"_id": "q1", "text": "How to remove?"}))
    (dataset / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\tpg#b\t1\n")
    missed = {"q1": {"rank": 12, "instead": ["pg#a"]}}
    results = [
        {
            "dataset": "tiny",
            "stages": ["bm25"],
            "variants": {
                "none": {"stages": {"bm25": {"misses": missed}}},
                "offline": {"stages": {"bm25": {"misses": {}}}},
            },
        }
    ]
    report = contextual.misses_report(results, [dataset])
    assert "## tiny bm25 none: 1 missed\n- q1 rank 12 (none: 12): How to remove?" in report
    assert "answer:  pg#b [Page] Remove it with apt." in report
    assert "instead: pg#a [Page] Install it with apt." in report
    assert "## tiny bm25 offline: 0 missed\n- q1 rank <=10 (none: 12): How to remove?" in report
