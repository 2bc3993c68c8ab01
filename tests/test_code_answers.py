"""An answer from source code keeps the code's lines: a fenced block in the code's language,
under a line naming the file and the lines quoted, cited. Flattened into one paragraph, code
cannot be read or copied."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from langchain_core.documents import Document

from footnote.graph.code_quotes import FENCE_LANGUAGE, code_language, quote_code
from footnote.graph.graph import make_graph
from footnote.graph.grounding import ground
from footnote.ingest.parsers.text import CODE_SUFFIXES
from footnote.ingest.pipeline import ingest

FENCED = re.compile(r"```(?P<lang>\w+)\n(?P<code>.*?)\n```", re.S)


def ask(index: Path, question: str) -> dict[str, Any]:
    graph: Any = make_graph()
    return graph.invoke(
        {"messages": [{"role": "user", "content": question}]}, context={"index_dir": str(index)}
    )


@pytest.mark.parametrize(
    "question", ["How do I deploy a service?", "What does deploy.py do?", "How is a deploy run?"]
)
def test_code_comes_back_in_a_fenced_block_cited_by_line(
    handbook_index: Path, handbook_dir: Path, question: str
) -> None:
    out = ask(handbook_index, question)
    text = out["messages"][-1].content
    block = FENCED.search(text)
    assert block is not None, text
    assert block.group("lang") == "python"
    source_lines = (handbook_dir / "deploy.py").read_text().splitlines()
    quoted = block.group("code").splitlines()
    assert len(quoted) > 1, "the code keeps its line breaks"
    # The quote is the file's own lines, indentation and all, and the caption names them
    # (ingest may shorten a run of blank lines).
    caption = re.search(r"deploy\.py, lines? (\d+)(?:–(\d+))? \[(\d+)\]:\n```", text)
    assert caption is not None, text
    first, last = int(caption.group(1)), int(caption.group(2) or caption.group(1))
    assert [line for line in quoted if line.strip()] == [
        line for line in source_lines[first - 1 : last] if line.strip()
    ]
    assert any(line.startswith("    subprocess.run(") for line in quoted)
    cited = {c["n"]: c for c in out["citations"]}
    entry = cited[int(caption.group(3))]
    assert entry["source"] == "deploy.py"
    assert entry["lines"][0] <= first <= last <= entry["lines"][1]


def test_prose_answers_are_unchanged(handbook_index: Path) -> None:
    out = ask(handbook_index, "How often do I have to change my API key?")
    assert out["citations"][0]["source"] == "keys.md"
    assert "```" not in out["messages"][-1].content


def test_a_long_code_chunk_is_quoted_where_the_question_points(tmp_path: Path) -> None:
    lines = [f"def step_{i}(value):\n    return value + {i}\n" for i in range(40)]
    lines[31] = "def rotate_credentials(vault):\n    vault.rotate(all_keys=True)\n"
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "tasks.py").write_text("\n".join(lines))
    summary = ingest([tmp_path / "docs"], tmp_path / "index")
    assert not summary.failed
    out = ask(tmp_path / "index", "How are the credentials rotated in the vault?")
    text = out["messages"][-1].content
    block = FENCED.search(text)
    assert block is not None, text
    assert "vault.rotate(all_keys=True)" in block.group("code")
    assert len(block.group("code").splitlines()) <= 20


def test_a_code_block_that_is_not_the_sources_own_lines_is_checked_line_by_line() -> None:
    doc = Document(
        page_content="def deploy(service):\n    run(service)\n",
        id="d#top:0",
        metadata={"source": "deploy.py", "lines": [1, 2]},
    )
    assert code_language(doc) == "python"
    quoted = quote_code(doc, 1, [0, 1])
    assert ground(quoted, [doc]).text == quoted
    forged = quoted.replace("run(service)", "delete_everything(service)")
    assert "delete_everything" not in ground(forged, [doc]).text
    # A caption that claims something is a claim like any other sentence.
    claimed = quoted.replace("deploy.py, lines 1–2 [1]:", "It deletes production [1]:")
    assert "deletes production" not in ground(claimed, [doc]).text


def test_prose_is_never_fenced() -> None:
    prose = Document(page_content="Rotate keys.", metadata={"source": "keys.md", "lines": [1, 1]})
    web = Document(page_content="x = 1", metadata={"source": "a.py", "kind": "web"})
    assert code_language(prose) is None and code_language(web) is None


def test_every_suffix_parsed_as_code_has_a_fence_language() -> None:
    assert set(FENCE_LANGUAGE) == CODE_SUFFIXES
