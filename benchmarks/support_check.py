"""How well the citation support check (graph/support.py) tells good claims from bad ones.

For every question whose gold passage the pipeline retrieves, claims are built from the gold
chunk and checked against a cited source:

- good, quoted: the gold chunk's sentence closest to the question, citing the gold chunk (what
  the offline extractive answer writes);
- good, fused: that sentence and the next joined into one claim (an LLM's habit), citing gold;
- good, trimmed: the sentence cut to its first 70% of words, citing gold;
- bad, wrong source: the quoted sentence citing the best-ranked retrieved chunk that is not
  gold (topically close: retrieval ranked it high for the same question);
- bad, fabricated: the quoted sentence with its two rarest words replaced by rare words of
  that close chunk (a wrong identifier or option: the typical invented detail), citing gold;
- outside the target, reported apart (`limit_*`): the quoted sentence negated ("not" added
  after its first auxiliary verb), citing gold. Same words, opposite meaning: a lexical and
  embedding check is not built to catch it, and the table says how often it does.

A wrong-source pair is skipped when the close chunk happens to contain the quoted sentence too
(then it is supported). No LLM is involved, so the claims are deterministic; an LLM's real
paraphrases are not measured here (no model is reachable from this machine).

    python benchmarks/support_check.py DATASET_DIR [DATASET_DIR ...] [--grid] [--json]

With --grid the decision rule is evaluated over a grid of thresholds on the first dataset (dev)
and the rows that meet the target there are shown on every dataset.
"""

from __future__ import annotations

import argparse
import json
import re
from collections import defaultdict
from pathlib import Path
from typing import Any

from langchain_core.documents import Document

from footnote.evaluation.retrieval import prepare_index
from footnote.graph import support
from footnote.graph.citations import strip_citation_marks
from footnote.store.text import keyword_tokens, split_sentences
from footnote.store.types import Caller
from footnote.tools.documents import retrieve_documents
from footnote.tools.retrieval import get_retriever
from footnote.tools.search import SearchRequest

KINDS = (
    "good_quoted",
    "good_fused",
    "good_trimmed",
    "bad_wrong_source",
    "bad_fabricated",
    "limit_negated",
)
_AUXILIARY = re.compile(
    r"\b(is|are|was|were|can|will|should|must|does|do|has|have|may|could|would)\b(?! not\b)"
)


def sentences_of(doc: Document) -> list[str]:
    return [
        s
        for s in split_sentences(strip_citation_marks(doc.page_content))
        if len(s.split()) >= 6 and not s.rstrip().endswith("?")
    ]


def fabricate(sentence: str, close: Document, gold: Document, idf: Any) -> str | None:
    """Swap the sentence's two rarest words for rare words of the close chunk absent from gold."""
    gold_terms = set(keyword_tokens(gold.page_content))
    words = re.findall(r"[A-Za-z][A-Za-z0-9_]{3,}", sentence)
    ranked = sorted(
        {w for w in words if keyword_tokens(w)}, key=lambda w: -idf(keyword_tokens(w)[0])
    )
    donors = sorted(
        {
            w
            for w in re.findall(r"[A-Za-z][A-Za-z0-9_]{3,}", close.page_content)
            if keyword_tokens(w) and keyword_tokens(w)[0] not in gold_terms
        },
        key=lambda w: (-idf(keyword_tokens(w)[0]), w),
    )
    if len(ranked) < 2 or len(donors) < 2:
        return None
    out = sentence
    for old, new in zip(ranked[:2], donors[:2], strict=True):
        out = re.sub(rf"\b{re.escape(old)}\b", new, out)
    return out


def negate(sentence: str) -> str | None:
    """The sentence with "not" after its first auxiliary verb; None when it has none."""
    match = _AUXILIARY.search(sentence)
    if match is None:
        return None
    return f"{sentence[: match.end()]} not{sentence[match.end() :]}"


def build_claims(dataset_dir: Path) -> list[dict[str, Any]]:
    prepared = prepare_index(dataset_dir)
    retriever = get_retriever(prepared.index_dir)
    claims = []
    for qid, question in sorted(prepared.dataset.queries.items()):
        gold_ids = set(prepared.dataset.qrels[qid])
        docs = retrieve_documents(
            SearchRequest(
                query=question, index_dir=prepared.index_dir, k=8, caller=Caller.operator()
            )
        )
        is_gold = [prepared.source_to_id.get(d.metadata["source"]) in gold_ids for d in docs]
        gold = next((d for d, g in zip(docs, is_gold, strict=True) if g), None)
        close = next((d for d, g in zip(docs, is_gold, strict=True) if not g), None)
        if gold is None or close is None:
            continue
        sentences = sentences_of(gold)
        if not sentences:
            continue
        asked = set(keyword_tokens(question))
        best = max(
            range(len(sentences)), key=lambda i: len(asked & set(keyword_tokens(sentences[i])))
        )
        quoted = sentences[best]
        words = quoted.rstrip(".").split()
        variants = {
            "good_quoted": (quoted, gold),
            "good_trimmed": (" ".join(words[: max(4, round(0.7 * len(words)))]) + ".", gold),
        }
        if not support.is_quote(quoted, [close]):
            variants["bad_wrong_source"] = (quoted, close)
        negated = negate(quoted)
        if negated:
            variants["limit_negated"] = (negated, gold)
        if best + 1 < len(sentences):
            following = sentences[best + 1]
            variants["good_fused"] = (
                f"{quoted.rstrip('.')}, and {following[0].lower()}{following[1:]}",
                gold,
            )
        fabricated = fabricate(quoted, close, gold, retriever.idf)
        if fabricated and fabricated != quoted:
            variants["bad_fabricated"] = (fabricated, gold)
        for kind, (claim, cited) in variants.items():
            answer = f"{claim.rstrip()} [1]"
            lexical, rare_missing = support.lexical_support(claim, [cited], retriever.idf_weights)
            semantic = support.semantic_support(claim, [cited], retriever.embeddings.embed_array)
            (check,) = support.check_claims(
                answer, [cited], embed=retriever.embeddings.embed_array, idf=retriever.idf_weights
            )
            claims.append(
                {
                    "qid": qid,
                    "kind": kind,
                    "claim": claim,
                    "lexical": lexical,
                    "rare_missing": rare_missing,
                    "semantic": semantic,
                    "verbatim": check.verbatim,
                    "terms": check.terms,
                    "flagged": not check.supported,
                }
            )
    return claims


def rates(claims: list[dict[str, Any]], flagged: Any) -> dict[str, float]:
    by_kind: dict[str, list[bool]] = defaultdict(list)
    for c in claims:
        by_kind[c["kind"]].append(bool(flagged(c)))
    out = {kind: sum(v) / len(v) for kind, v in by_kind.items()}
    good = [f for k, v in by_kind.items() if k.startswith("good") for f in v]
    bad = [f for k, v in by_kind.items() if k.startswith("bad") for f in v]
    out["good_flagged"] = sum(good) / len(good) if good else 0.0
    out["bad_detected"] = sum(bad) / len(bad) if bad else 0.0
    return out


def rule(lexical: float, rare: float, semantic: float) -> Any:
    """The shipped decision (`ClaimCheck.supported`) with other thresholds."""

    def flagged(c: dict[str, Any]) -> bool:
        if c["verbatim"]:
            return False
        return not (
            c["terms"] >= support.MIN_TERMS
            and c["lexical"] >= lexical
            and c["rare_missing"] <= rare
            and c["semantic"] >= semantic
        )

    return flagged


GRID = [
    (lexical, rare, semantic)
    for lexical in (0.5, 0.6, 0.7, 0.8, 0.9)
    for rare in (0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
    for semantic in (0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8)
]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("datasets", type=Path, nargs="+", help="dev first, then check sets")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--grid", action="store_true", help="also the threshold grid")
    args = parser.parse_args(argv)
    shipped = (support.LEXICAL_FLOOR, support.RARE_MISSING, support.SEMANTIC_SUPPORT)
    results = []
    for dataset in args.datasets:
        claims = build_claims(dataset)
        counts: dict[str, int] = defaultdict(int)
        for c in claims:
            counts[c["kind"]] += 1
        results.append(
            {
                "dataset": dataset.name,
                "claims": dict(counts),
                "flagged": rates(claims, lambda c: c["flagged"]),
                "rows": claims,
            }
        )
    grid_rows = []
    if args.grid:
        for point in GRID:
            per = [rates(r["rows"], rule(*point)) for r in results]
            grid_rows.append({"point": point, "rates": per})
    if args.json:
        out = {
            "thresholds": dict(zip(("lexical", "rare_missing", "semantic"), shipped, strict=True)),
            "results": results,
            "grid": grid_rows,
        }
        print(json.dumps(out, indent=2))
        return 0
    print(
        f"Thresholds: lexical >= {shipped[0]}, rarest missing <= {shipped[1]}, "
        f"semantic >= {shipped[2]}"
    )
    names = [r["dataset"] for r in results]
    print("\n| claims | " + " | ".join(f"{n}: n | {n}: flagged" for n in names) + " |")
    print("|---|" + "---:|---:|" * len(names))
    for kind in KINDS:
        cells = []
        for r in results:
            n = r["claims"].get(kind, 0)
            cells.append(f"{n} | {r['flagged'][kind]:.3f}" if n else "0 | -")
        print(f"| {kind} | " + " | ".join(cells) + " |")
    for key, label in (("bad_detected", "bad detected"), ("good_flagged", "good flagged")):
        cells = [f" | **{r['flagged'][key]:.3f}**" for r in results]
        print(f"| **{label}** |" + " |".join(cells) + " |")
    if grid_rows:
        meets = [
            g
            for g in grid_rows
            if g["rates"][0]["bad_detected"] >= 0.95 and g["rates"][0]["good_flagged"] <= 0.05
        ]
        best = sorted(
            grid_rows,
            key=lambda g: -(g["rates"][0]["bad_detected"] - g["rates"][0]["good_flagged"]),
        )[:10]
        print(f"\nGrid: {len(meets)} of {len(grid_rows)} points meet the target on {names[0]}.")
        print(
            "\n| lexical | rare missing | semantic | "
            + " | ".join(f"{n}: bad detected | {n}: good flagged" for n in names)
            + " |"
        )
        print("|---|---|---|" + "---:|---:|" * len(names))
        for g in (meets or best)[:15]:
            cells = " | ".join(
                f"{r['bad_detected']:.3f} | {r['good_flagged']:.3f}" for r in g["rates"]
            )
            print(f"| {g['point'][0]} | {g['point'][1]} | {g['point'][2]} | {cells} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
