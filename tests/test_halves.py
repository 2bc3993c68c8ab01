"""The fitting/reporting split (footnote.evaluation.halves) is fixed, balanced and needs no
list: a question's half depends on its corpus and id alone."""

from __future__ import annotations

from collections import Counter

from footnote.evaluation.halves import HALVES, half_of


def test_a_questions_half_never_moves() -> None:
    assert [half_of("pyfaq-core", f"q{i}") for i in range(50)] == [
        half_of("pyfaq-core", f"q{i}") for i in range(50)
    ]
    # pinned: changing the rule would move questions into the half that chose parameters
    assert [half_of("handbook", f"q{i}") for i in range(6)] == [
        "report", "fit", "report", "fit", "report", "fit"
    ]  # fmt: skip
    assert {half_of("a", str(i)) for i in range(20)} == set(HALVES)


def test_the_halves_are_about_equal_and_differ_by_corpus() -> None:
    counts = Counter(half_of("debfaq", str(i)) for i in range(2000))
    assert 900 <= counts["fit"] <= 1100
    same = sum(half_of("debfaq", str(i)) == half_of("pyfaq-core", str(i)) for i in range(2000))
    assert 900 <= same <= 1100
