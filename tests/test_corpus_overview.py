"""An offline answer to "What does the handbook cover?" is an overview a reader can follow:
one cited line per document the caller may read, by title, no raw code docstring, within
the sentence budget and naming the documents past it (graph/global_route.py)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from footnote.graph.graph import make_graph

QUESTION = "What does the handbook cover?"
EVERYONE = {"keys.md", "deploy.py", "expenses.md", "holidays.md", "onboarding.md",
            "security-policy.txt", "sts.md", "vpn.md"}  # fmt: skip
LINE = re.compile(r"^- (?P<title>[^:\n]+)(?:: .+)? \[(?P<n>\d+)\]$")


def overview(index: Path, **context: Any) -> tuple[list[str], dict[int, str], dict[str, Any]]:
    graph: Any = make_graph()
    out = graph.invoke({"messages": [{"role": "user", "content": QUESTION}]},
                              context={"index_dir": str(index), **context})  # fmt: skip
    lines = str(out["messages"][-1].content).splitlines()
    sources = {c["n"]: c["source"] for c in out["citations"]}
    return lines, sources, out


def test_the_overview_is_one_cited_line_per_document_by_title(handbook_index: Path) -> None:
    lines, sources, out = overview(handbook_index)
    matched = [LINE.match(line) for line in lines]
    assert all(matched), lines
    cited = [sources[int(m["n"])] for m in matched if m]
    assert sorted(cited) == sorted(EVERYONE)  # every readable document, once
    titles = [m["title"] for m in matched if m]
    assert titles == sorted(titles, key=str.casefold)
    assert out["footnote_unsupported_claims"] == []


def test_no_overview_line_quotes_a_raw_docstring(handbook_index: Path) -> None:
    lines, _, _ = overview(handbook_index)
    assert not [line for line in lines if '"""' in line or "'''" in line]
    assert any(line.startswith("- deploy.py: Deploy a service to staging") for line in lines)


def test_the_on_call_documents_are_listed_only_for_the_on_call_group(
    handbook_index: Path,
) -> None:
    inside, sources, _ = overview(handbook_index, user_groups=["engineering"])
    assert set(sources.values()) == EVERYONE | {"oncall.md"}
    assert any(line.startswith("- On-call: ") for line in inside)
    outside, sources, _ = overview(handbook_index, user_groups=["hr"])
    assert set(sources.values()) == EVERYONE
    assert "on-call" not in "\n".join(outside).lower()


def test_documents_past_the_line_budget_are_named_after_it(handbook_index: Path) -> None:
    lines, sources, _ = overview(handbook_index, max_global_sentences=3)
    assert len(sources) == 3 and all(LINE.match(line) for line in lines[:3])
    assert len(lines) == 4 and lines[3].startswith("And ")
    more = re.fullmatch(r"And (\d+) more: (.+)\.", lines[3])
    assert more and int(more[1]) == len(more[2].split(", ")) >= 1
