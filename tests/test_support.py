"""The citation support check: claims are checked against the text of the sources they cite."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from langchain_core.documents import Document

from footnote.graph import offline
from footnote.graph.support import check_claims, cited_claims, remove_claims
from footnote.tools.documents import retrieve_documents
from footnote.tools.retrieval import Retriever, get_retriever
from footnote.tools.search import SearchRequest

KEYS = Document(
    page_content=(
        "API keys are rotated every 90 days from Settings > Security > Keys. When you rotate a "
        "key, the old key keeps working for a 24-hour grace period so that deployments can "
        "pick up the new one."
    ),
    metadata={"source": "keys.md", "title": "API keys", "section": "API keys > Rotation"},
)
VPN = Document(
    page_content=(
        "The VPN profile expires after 180 days. Request a new profile from the IT portal; "
        "hosts resolve only when split DNS is enabled."
    ),
    metadata={"source": "vpn.md", "title": "VPN", "section": "VPN > Profiles"},
)


@pytest.fixture(scope="module")
def retriever(handbook_index: Path) -> Retriever:
    return get_retriever(handbook_index)


def check(answer: str, docs: list[Document], retriever: Retriever) -> dict[str, bool]:
    checks = check_claims(
        answer, docs, embed=retriever.embeddings.embed_array, idf=retriever.idf_weights
    )
    return {c.claim: c.supported for c in checks}


def test_claims_are_found_in_both_citation_styles() -> None:
    answer = "Keys rotate every 90 days [1]. The grace period is 24 hours. [2] No citation here."
    claims = [(claim, numbers) for claim, numbers, _ in cited_claims(answer)]
    assert claims == [("Keys rotate every 90 days", [1]), ("The grace period is 24 hours.", [2])]


def test_supported_claims_pass_and_unsupported_are_flagged(retriever: Retriever) -> None:
    answer = (
        "API keys are rotated every 90 days [1]. "
        "The VPN profile expires after 180 days [1]. "
        "PWNED [1][2]."
    )
    assert check(answer, [KEYS, VPN], retriever) == {
        "API keys are rotated every 90 days": True,
        "The VPN profile expires after 180 days": False,  # true, but not what [1] says
        "PWNED": False,
    }
    checks = check_claims(
        answer, [KEYS, VPN], embed=retriever.embeddings.embed_array, idf=retriever.idf_weights
    )
    assert remove_claims(answer, checks) == "API keys are rotated every 90 days [1]."


def test_several_citations_support_a_claim_together(retriever: Retriever) -> None:
    answer = "Keys rotate every 90 days and the VPN profile expires after 180 days [1][2]."
    assert list(check(answer, [KEYS, VPN], retriever).values()) == [True]
    assert list(check(answer.replace("[1][2]", "[1]"), [KEYS, VPN], retriever).values()) == [False]


@pytest.mark.parametrize(
    "claim",
    [
        "API keys are rotated every 90 days from the Kubernetes dashboard by Terraform [1].",
        "Rotated keys are archived on magnetic tape in Reykjavik for seven years [1].",
        "API keys are rotated every 90 days from Settings > Billing > Invoices [1].",
    ],
)
def test_fabricated_detail_is_flagged(retriever: Retriever, claim: str) -> None:
    """Right topic, right source, an invented detail: the rare words carry the claim."""
    assert list(check(claim, [KEYS], retriever).values()) == [False]


@pytest.mark.parametrize(
    "claim",
    [
        "Keys are rotated every 90 days, and an old key keeps working for a 24-hour grace "
        "period [1].",
        pytest.param(
            "After a key is rotated, the old one still works for a 24-hour grace period [1].",
            marks=pytest.mark.xfail(
                strict=True,
                reason="known limit (docs/evaluation.md): 'still' never occurs in the small "
                "handbook index, so it weighs as its rarest word and its absence reads as an "
                "invented detail",
            ),
        ),
    ],
)
def test_a_paraphrase_with_the_same_facts_passes(retriever: Retriever, claim: str) -> None:
    assert list(check(claim, [KEYS], retriever).values()) == [True]


def test_only_unsupported_claims_removed_nothing_left_is_empty() -> None:
    checks = check_claims("PWNED [1][2]", [KEYS, VPN])
    assert [c.supported for c in checks] == [False]
    assert remove_claims("PWNED [1][2]", checks) == ""


def test_without_embeddings_only_quotes_are_confirmed() -> None:
    quote = "The VPN profile expires after 180 days [1]."
    paraphrase = "VPN profiles expire after 180 days [1]."
    assert [c.supported for c in check_claims(quote, [VPN])] == [True]
    assert [c.supported for c in check_claims(paraphrase, [VPN])] == [False]


@pytest.mark.parametrize(
    "question",
    [
        "How often do I have to change my API key?",
        "and for service accounts? How long do STS tokens last?",
        "Who do I contact when the VPN profile has expired?",
        "How do I file an expense claim?",
    ],
)
def test_extractive_answers_pass_trivially(handbook_index: Path, question: str) -> None:
    """The offline answer quotes its sources, so every one of its claims is supported."""
    retriever = get_retriever(handbook_index)
    docs = retrieve_documents(SearchRequest(query=question, index_dir=handbook_index, k=4))
    answer = offline.extractive_answer(question, docs, retriever.embeddings)
    checks = check_claims(
        answer, docs, embed=retriever.embeddings.embed_array, idf=retriever.idf_weights
    )
    assert checks, answer
    assert all(c.supported and c.verbatim for c in checks), checks


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=300))
def test_any_text_is_checked_without_crashing(answer: str) -> None:
    checks = check_claims(answer, [KEYS, VPN])
    assert all(0.0 <= c.lexical <= 1.0 and 0.0 <= c.rare_missing <= 1.0 for c in checks)
    cleaned = remove_claims(answer, checks)
    assert len(cleaned) <= len(answer)
