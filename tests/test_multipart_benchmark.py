"""The multipart benchmark's computed figures: the independence ceiling it prints beside the
measured two-part rate, and the coverage sweep's counts of both sides."""

from __future__ import annotations

import math

from tests.benchmark_modules import load_benchmark


def test_the_independence_ceiling_is_computed_from_the_pairs() -> None:
    multipart = load_benchmark("multipart")
    rows = [
        {"gold": [True, True], "alone": [True, True]},
        {"gold": [True, False], "alone": [True, False]},
        {"gold": [False, True], "alone": [True, True]},
        {"gold": [True, False], "alone": [False, False]},
    ]
    ceiling = multipart.independence_ceiling(rows, single_rate=0.6)
    assert ceiling["two_part_independent"] == round(3 / 4 * 2 / 4, 3)
    assert ceiling["two_part_both_alone"] == round(2 / 4, 3)
    assert ceiling["two_part_single_squared"] == round(0.6**2, 3)
    needed = ceiling["two_part_needed_per_part"]
    assert math.isclose(needed**2, 0.8 * 0.6, abs_tol=1e-3)


def test_the_coverage_sweep_counts_both_sides() -> None:
    coverage = load_benchmark("multipart_coverage")
    rows = {
        # An answerable pair whose second part (gold cited) is far below the first.
        "two": [
            {"evidence": [(0.9, 1.0), (0.55, 0.3)], "covered": [True, True], "gold": [True, True]}
        ],  # fmt: skip
        # A partial pair: the held-out first part kept a near miss, the other is strong.
        "partial": [
            {"evidence": [(0.6, 0.4), (0.95, 1.0)], "covered": [True, True], "gone": 0}
        ],  # fmt: skip
    }
    assert coverage.effect(rows, lambda part, other: False) == {
        "two_abstained": 0, "two_gold_lost": 0, "two_both": 1,
        "partial_reported": 0, "partial_known_abstained": 0,
    }  # fmt: skip
    far_below = coverage.effect(rows, lambda part, other: part[0] < other[0] - 0.3)
    assert far_below == {
        "two_abstained": 1, "two_gold_lost": 1, "two_both": 0,
        "partial_reported": 1, "partial_known_abstained": 0,
    }  # fmt: skip
