"""The keyword index in bm25s's own format, built from postings spilled to disk a batch at a
time, so building it never holds every tokenized document.

bm25s keeps BM25 scores as a sparse matrix, documents by terms, in CSC form: per term (a
column), the documents that contain it in ascending order with each one's score. Each batch
of documents is turned into (term, document, count) postings sorted by term, counted into
document frequencies and written to a scratch file. Once every document is in, the scores
need only the frequencies and document lengths, so the columns are filled a range of terms
at a time, each range gathered from every batch's file, and appended to the .npy files.
The scores are bm25s's, computed by its own functions: the files load with
`bm25s.BM25.load` and score as an index built by `bm25s.BM25.index` from the same tokens.
"""

from __future__ import annotations

import json
from array import array
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

EMPTY_DOCUMENT = "\x00empty"
"""The token of a document with no keyword (and of the placeholder of an empty index)."""


class _Vocabulary(dict[str, int]):
    """Token -> id, an unseen token getting the next id."""

    def __missing__(self, token: str) -> int:
        self[token] = found = len(self)
        return found


class KeywordPostings:
    """Collects documents' tokens a batch at a time (`add`), then writes the bm25s files
    (`write`), holding the vocabulary, per-term and per-document counts, and at most
    `entries_per_pass` postings (or one term's) at a time."""

    def __init__(self, scratch: Path, entries_per_pass: int) -> None:
        self.scratch = scratch
        self.scratch.mkdir()
        self.entries_per_pass = entries_per_pass
        self.documents = 0
        self._vocabulary = _Vocabulary()
        self._frequencies = np.zeros(0, dtype=np.int64)  # documents holding each term
        self._lengths: list[np.ndarray] = []  # tokens per document, per batch
        self._spills: list[Path] = []

    def add(self, documents: Iterable[list[str]]) -> None:
        """One batch of documents' tokens (each non-empty), in row order."""
        ids = array("q")
        lengths: list[int] = []
        lookup = self._vocabulary.__getitem__
        for tokens in documents:
            ids.extend(map(lookup, tokens))
            lengths.append(len(tokens))
        if not lengths:
            return
        terms = np.frombuffer(ids, dtype=np.int64)
        docs = self.documents + np.repeat(np.arange(len(lengths), dtype=np.int64), lengths)
        postings, counts = np.unique((terms << 32) | docs, return_counts=True)  # term, then doc
        del terms, docs, ids
        spill = self.scratch / f"{len(self._spills):06d}.npy"
        np.save(spill, np.stack([postings >> 32, postings & 0xFFFFFFFF, counts]).astype(np.int32))
        self._spills.append(spill)
        found = np.bincount(postings >> 32, minlength=len(self._vocabulary))
        grown = np.zeros(len(self._vocabulary), dtype=np.int64)
        grown[: len(self._frequencies)] = self._frequencies
        self._frequencies = grown + found
        self._lengths.append(np.asarray(lengths, dtype=np.int64))
        self.documents += len(lengths)

    def write(self, directory: Path) -> None:
        """bm25s's files (scores, vocabulary, parameters) for the documents added so far."""
        import bm25s
        from bm25s import scoring

        model = bm25s.BM25()
        if model.method in model.methods_requiring_nonoccurrence:
            raise ValueError(f"bm25s method {model.method!r} is not supported here")
        idf_of = scoring._select_idf_scorer(model.idf_method)
        tfc = scoring._select_tfc_scorer(model.method)
        documents, frequencies = self.documents, self._frequencies
        lengths = np.concatenate(self._lengths)
        average = np.array(lengths).mean()  # as bm25s averages them
        idf = np.zeros(len(frequencies), dtype=model.dtype)
        for at, df in enumerate(frequencies.tolist()):
            idf[at] = idf_of(df, N=documents)
        indptr = np.concatenate([[0], np.cumsum(frequencies)]).astype(np.int64)
        total = int(indptr[-1])
        directory.mkdir()
        with (
            _NpyWriter(directory / "data.csc.index.npy", np.dtype(model.dtype), total) as data,
            _NpyWriter(directory / "indices.csc.index.npy", np.dtype(model.int_dtype),
                       total) as indices,
        ):  # fmt: skip
            for first, last in _term_ranges(indptr, self.entries_per_pass):
                term, doc, count = self._postings(first, last)
                order = np.argsort(term, kind="stable")  # by term; documents stay in order
                term, doc, count = term[order], doc[order], count[order]
                del order
                tf = count.astype(model.dtype)
                scores = idf[term] * tfc(tf_array=tf, l_d=lengths[doc], l_avg=average,
                                         k1=model.k1, b=model.b, delta=model.delta)  # fmt: skip
                data.write(scores.astype(model.dtype))
                indices.write(doc.astype(model.int_dtype))
        np.save(directory / "indptr.csc.index.npy", indptr, allow_pickle=False)
        vocabulary = dict(self._vocabulary)
        vocabulary[""] = len(vocabulary)  # bm25s's empty token, last, outside the matrix
        (directory / "vocab.index.json").write_text(
            json.dumps(vocabulary, ensure_ascii=False), encoding="utf-8"
        )
        params = {"k1": model.k1, "b": model.b, "delta": model.delta, "method": model.method,
                  "idf_method": model.idf_method, "dtype": model.dtype,
                  "int_dtype": model.int_dtype, "num_docs": documents,
                  "version": bm25s.__version__, "backend": model.backend}  # fmt: skip
        (directory / "params.index.json").write_text(json.dumps(params, indent=4), "utf-8")

    def _postings(self, first: int, last: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Every batch's postings of terms first..last-1, in batch order."""
        parts: list[np.ndarray] = []
        for spill in self._spills:
            stored = np.load(spill, mmap_mode="r", allow_pickle=False)
            lo, hi = np.searchsorted(stored[0], [first, last])
            parts.append(np.array(stored[:, lo:hi]))
            del stored
        joined = np.concatenate(parts, axis=1)
        return joined[0], joined[1], joined[2]


def _term_ranges(indptr: np.ndarray, entries: int) -> Iterable[tuple[int, int]]:
    """Consecutive ranges of terms holding at most `entries` postings (or a single term)."""
    first, terms = 0, len(indptr) - 1
    while first < terms:
        last = int(np.searchsorted(indptr, indptr[first] + entries, side="right")) - 1
        last = min(max(last, first + 1), terms)
        yield first, last
        first = last


class _NpyWriter:
    """A one-dimensional .npy file of known length, written as a header then appended
    blocks (what `np.save` would write for the whole array)."""

    def __init__(self, path: Path, dtype: np.dtype[Any], length: int) -> None:
        self.dtype, self.length, self.written = dtype, length, 0
        self._handle = path.open("wb")
        header = np.lib.format.header_data_from_array_1_0(np.empty(0, dtype=dtype))
        header["shape"] = (length,)
        np.lib.format.write_array_header_1_0(self._handle, header)

    def write(self, block: np.ndarray) -> None:
        self._handle.write(np.ascontiguousarray(block, dtype=self.dtype).tobytes())
        self.written += len(block)

    def __enter__(self) -> _NpyWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self._handle.close()
        if exc[0] is None and self.written != self.length:
            raise ValueError(f"wrote {self.written} entries of {self.length}")
