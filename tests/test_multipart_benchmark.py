"""The multipart benchmark's computed figures: the independence ceiling it prints beside the
measured two-part rate, and the coverage sweep's counts of both sides."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path
from types import ModuleType

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def _load(name: str) -> ModuleType:
    sys.path.insert(0, str(BENCHMARKS))
    try:
        spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(BENCHMARKS))


def test_the_independence_ceiling_is_computed_from_the_pairs() -> None:
    multipart = _load("multipart")
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
    coverage = _load("multipart_coverage")
    rows = {
        # An answerable pair whose second part (gold cited) is far below the first.
        "two": [{"evidence": [(0.9, 1.0), (0.55, 0.3)], "covered": [True, True],
                 "gold": [True, True]}],  # fmt: skip
        # A partial pair: the held-out first part kept a near miss, the other is strong.
        "partial": [{"evidence": [(0.6, 0.4), (0.95, 1.0)], "covered": [True, True],
                     "gone": 0}],  # fmt: skip
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
