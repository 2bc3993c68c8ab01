"""The dense index, written from vectors spooled to disk, so building it never holds them all.

Vectors are appended to a scratch file as ingest hands them over (`VectorSpool`) and read
back a batch at a time with plain reads (not a memory map, whose pages would count as the
writer's memory). Below the IVF threshold they are added to an exact flat index, itself
bounded by that threshold. From there on the IVF quantizer is trained on a sample, every
vector is assigned to its list a batch at a time, and the file is laid out exactly as
`faiss.write_index` writes an `IndexIVFFlat` with array inverted lists and an array direct
map (the layout store/file_checks.py checks), each batch's codes written where they belong:

    header, nlist, nprobe, quantizer    what faiss writes of the trained, empty index
    direct map                          1 (array), ntotal, then per row (list << 32 | offset)
    inverted lists                      "ilar", nlist, code size, list sizes ("full" when
                                        more than half the lists are used, else "sprs"
                                        pairs), then per non-empty list its codes, its ids
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

_HEADER = "<4siqqqBi"
"""faiss's index header: fourcc, dimension, ntotal, two unused counts, trained, metric."""


class VectorSpool:
    """Float32 rows appended to a scratch file, read back in order a batch at a time."""

    def __init__(self, path: Path, dimension: int) -> None:
        self.path = path
        self.dimension = dimension
        self.rows = 0
        self._handle = path.open("wb")

    def add(self, vectors: np.ndarray) -> None:
        block = np.ascontiguousarray(vectors, dtype=np.float32)
        if block.ndim != 2 or block.shape[1] != self.dimension:
            raise ValueError(f"vectors of shape {block.shape}, not (n, {self.dimension})")
        self._handle.write(block.data)
        self.rows += len(block)

    def close(self) -> None:
        self._handle.close()

    def batches(self, batch_rows: int) -> Iterator[tuple[int, np.ndarray]]:
        """(first row, rows) for every batch of at most `batch_rows` rows, in order."""
        if not self._handle.closed:
            self._handle.flush()
        with self.path.open("rb") as handle:
            for start in range(0, self.rows, batch_rows):
                n = min(batch_rows, self.rows - start)
                block = np.fromfile(handle, dtype=np.float32, count=n * self.dimension)
                yield start, block.reshape(n, self.dimension)

    def take(self, rows: np.ndarray, batch_rows: int) -> np.ndarray:
        """The rows at these sorted positions, gathered in one pass over the file."""
        out = np.empty((len(rows), self.dimension), dtype=np.float32)
        for start, block in self.batches(batch_rows):
            lo, hi = np.searchsorted(rows, [start, start + len(block)])
            out[lo:hi] = block[rows[lo:hi] - start]
        return out


def write_dense(
    path: Path, spool: VectorSpool, *, ivf_from: int, nprobe: int, batch_rows: int
) -> dict[str, Any]:
    """Exact flat index below `ivf_from` rows, IVF above; returns what the manifest records of
    it. The IVF keeps full vectors in its lists (so nprobe = nlist is exact search, the
    fallback) and a direct map (so rows can be reconstructed for grading and reuse)."""
    import faiss

    rows, dimension = spool.rows, spool.dimension
    if rows < ivf_from:
        flat = faiss.IndexFlatIP(dimension)
        for _, block in spool.batches(batch_rows):
            flat.add(block)
        faiss.write_index(flat, str(path))
        return {"kind": "flat"}
    nlist = int(np.sqrt(rows))
    ivf = faiss.IndexIVFFlat(faiss.IndexFlatIP(dimension), dimension, nlist,
                             faiss.METRIC_INNER_PRODUCT)  # fmt: skip
    sample = np.sort(np.random.default_rng(0).choice(rows, min(rows, 32 * nlist), replace=False))
    ivf.train(spool.take(sample, batch_rows))
    lists = np.empty(rows, dtype=np.int64)
    for start, block in spool.batches(batch_rows):
        lists[start : start + len(block)] = ivf.quantizer.assign(block, 1)[:, 0]
    _write_ivf(path, ivf, spool, lists, batch_rows)
    return {"kind": "ivf", "nlist": nlist, "nprobe": nprobe, "trained_on": len(sample),
            "threshold": ivf_from}  # fmt: skip


def _write_ivf(
    path: Path, ivf: Any, spool: VectorSpool, lists: np.ndarray, batch_rows: int
) -> None:
    import faiss

    rows, dimension, nlist = spool.rows, spool.dimension, int(ivf.nlist)
    code_size = 4 * dimension
    sizes = np.bincount(lists, minlength=nlist).astype(np.int64)
    list_start = np.concatenate([[0], np.cumsum(sizes)[:-1]])  # first rank of each list
    order = np.argsort(lists, kind="stable")  # rows in list order, by row within a list
    offset = np.empty(rows, dtype=np.int64)  # each row's position within its list
    offset[order] = np.arange(rows, dtype=np.int64) - list_start[lists[order]]
    del order
    used = np.flatnonzero(sizes)
    if len(used) > nlist // 2:
        encoding, size_fields = b"full", sizes
    else:
        encoding = b"sprs"
        size_fields = np.stack([used, sizes[used]], axis=1).reshape(-1)
    head = bytearray(struct.pack(_HEADER, b"IwFl", dimension, rows, 1 << 20, 1 << 20, 1, 0))
    head += struct.pack("<QQ", nlist, int(ivf.nprobe))
    head += faiss.serialize_index(ivf.quantizer).tobytes()
    head += struct.pack("<BQ", 1, rows)
    direct = len(head)  # the direct map's entries start here
    head_after = struct.pack("<4sQQ4sQ", b"ilar", nlist, code_size, encoding, len(size_fields))
    data = direct + 8 * rows + len(head_after) + 8 * len(size_fields)
    # Each list's bytes: its codes, then its ids; a list starts where the one before ends.
    list_at = data + np.concatenate([[0], np.cumsum(sizes * (code_size + 8))[:-1]])
    with path.open("wb") as handle:
        handle.write(head)
        for start in range(0, rows, batch_rows):
            stop = min(start + batch_rows, rows)
            handle.write(((lists[start:stop] << 32) | offset[start:stop]).tobytes())
        handle.write(head_after)
        handle.write(np.ascontiguousarray(size_fields, dtype=np.uint64).tobytes())
        handle.truncate(int(data + rows * (code_size + 8)))
        fd = handle.fileno()
        for start, block in spool.batches(batch_rows):
            # A list's rows in this batch hold consecutive places in it: one write per list.
            found = lists[start : start + len(block)]
            by_list = np.argsort(found, kind="stable")
            codes = block[by_list]
            ids = np.arange(start, start + len(block), dtype=np.int64)[by_list]
            firsts = np.flatnonzero(np.diff(found[by_list], prepend=-1))
            ends = np.append(firsts[1:], len(by_list))
            for first, end in zip(firsts.tolist(), ends.tolist(), strict=True):
                row = int(ids[first])
                number = int(lists[row])
                at = int(list_at[number])
                place = int(offset[row])
                os.pwrite(fd, codes[first:end].data, at + place * code_size)
                ids_at = at + int(sizes[number]) * code_size + place * 8
                os.pwrite(fd, ids[first:end].data, ids_at)
