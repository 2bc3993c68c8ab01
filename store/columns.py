"""Access and filter columns: a caller's row mask in a few array operations, not a loop.

Every filterable field is dictionary-encoded once, when a version is written, as *row sets*:
the rows sorted by the id of their value in a table of distinct values (access lists,
sources, sections, metadata objects), with offsets, so value v's rows are
`rows[offsets[v]:offsets[v + 1]]`. Dates are kept as rows sorted by day. A mask evaluates
the reference predicate (`Caller.may_see`, `Filters.matches`) once per *distinct value*,
then sets the rows of the values that pass (or clears those that fail, whichever is fewer),
so it agrees with the per-chunk check by construction and costs one scatter of the rows it
names. Masks are cached per index version: a caller's, each condition's, and each
(caller, filters) pair's, which a query gets read-only.

    columns/<column>.rows.npy, columns/<column>.offsets.npy   for access, source, section,
        metadata
    columns/<column>.values.json   their distinct values, in id order (a JSON list)
    columns/date.rows.npy, columns/date.days.npy   dated rows sorted by day (since 1970)
    columns/position.npy   row -> position of the chunk within its section (from its id)
"""

from __future__ import annotations

import datetime as dt
import fnmatch
import json
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import asdict, replace
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from footnote.store.types import Chunk, chunk_position, parse_date, require_date

DICTIONARY_COLUMNS = ("access", "source", "section", "metadata")
ARRAYS = (
    *(f"{name}.{part}" for name in DICTIONARY_COLUMNS for part in ("rows", "offsets")),
    "date.rows",
    "date.days",
    "position",
)
VALUES = tuple(f"{name}.values.json" for name in DICTIONARY_COLUMNS)
FILES = (*(f"{name}.npy" for name in ARRAYS), *VALUES)
"""Every file of columns/, as the manifest's checksums name them (under `columns/`)."""
CACHED_MASKS = 32
_EPOCH = dt.date(1970, 1, 1)


def _encode(value: Any) -> str:
    """The dictionary key of a value: equal JSON means one entry, evaluated once."""
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def build_columns(chunks: Iterable[Chunk]) -> tuple[dict[str, np.ndarray], dict[str, list[str]]]:
    """The column arrays and the distinct values (each JSON-encoded) they index."""
    builder = ColumnsBuilder()
    builder.add(chunks)
    return builder.finish()


class ColumnsBuilder:
    """Builds the columns a batch of chunks at a time: it keeps a few integers per row and the
    distinct values, never the chunks."""

    def __init__(self) -> None:
        self.rows = 0
        self._ids: dict[str, list[np.ndarray]] = {name: [] for name in DICTIONARY_COLUMNS}
        self._seen: dict[str, dict[str, int]] = {name: {} for name in DICTIONARY_COLUMNS}
        self._days: list[np.ndarray] = []
        self._dated: list[np.ndarray] = []
        self._positions: list[np.ndarray] = []

    def add(self, chunks: Iterable[Chunk]) -> None:
        ids: dict[str, list[int]] = {name: [] for name in DICTIONARY_COLUMNS}
        days: list[int] = []
        dated: list[int] = []
        positions: list[int] = []
        for row, chunk in enumerate(chunks, start=self.rows):
            for name, value in (
                ("access", chunk.access),
                ("source", chunk.source),
                ("section", chunk.section),
                ("metadata", chunk.metadata),
            ):
                table = self._seen[name]
                ids[name].append(table.setdefault(_encode(value), len(table)))
            date = parse_date(chunk.date)
            if date is not None:
                dated.append(row)
                days.append((date - _EPOCH).days)
            positions.append(chunk_position(chunk.id))
        self.rows += len(positions)
        for name, column in ids.items():
            self._ids[name].append(np.asarray(column, dtype=np.int32))
        self._days.append(np.asarray(days, dtype=np.int32))
        self._dated.append(np.asarray(dated, dtype=np.int32))
        self._positions.append(np.asarray(positions, dtype=np.int32))

    def finish(self) -> tuple[dict[str, np.ndarray], dict[str, list[str]]]:
        """The column arrays and the distinct values (each JSON-encoded) they index."""
        arrays: dict[str, np.ndarray] = {}
        for name, parts in self._ids.items():
            values = _joined(parts)
            arrays[f"{name}.rows"] = np.argsort(values, kind="stable").astype(np.int32)
            counts = np.bincount(values, minlength=len(self._seen[name]))
            arrays[f"{name}.offsets"] = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        days = _joined(self._days)
        order = np.argsort(days, kind="stable")
        arrays["date.rows"] = _joined(self._dated)[order]
        arrays["date.days"] = days[order]
        arrays["position"] = _joined(self._positions)
        return arrays, {name: list(table) for name, table in self._seen.items()}


def _joined(parts: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int32)


def save_columns(
    directory: Path, arrays: dict[str, np.ndarray], dictionary: dict[str, list[str]]
) -> None:
    directory.mkdir()
    for name in ARRAYS:
        np.save(directory / f"{name}.npy", arrays[name], allow_pickle=False)
    for name in DICTIONARY_COLUMNS:
        values = "[" + ",".join(dictionary[name]) + "]"  # each already JSON
        (directory / f"{name}.values.json").write_text(values, encoding="utf-8")


def read_values(directory: Path, name: str) -> list[Any]:
    """The distinct values of one column, decoded, in id order."""
    values = json.loads((directory / f"{name}.values.json").read_bytes().decode("utf-8"))
    if not isinstance(values, list):
        raise ValueError(f"columns/{name}.values.json is not a JSON list")
    return values


def load_columns(directory: Path, rows: int, distinct: Any) -> dict[str, np.ndarray]:
    """The column arrays, memory-mapped. A wrong type or shape, a row outside the index or
    offsets that do not cover its rows (`distinct`: the manifest's count of values per
    column) is damage (ValueError)."""
    if not isinstance(distinct, dict):
        raise ValueError("the manifest lacks the columns' value counts")
    arrays = {name: np.load(directory / f"{name}.npy", mmap_mode="r", allow_pickle=False)
              for name in ARRAYS}  # fmt: skip
    for name in DICTIONARY_COLUMNS:
        count = distinct.get(name)
        offsets = arrays[f"{name}.offsets"]
        if not isinstance(count, int) or offsets.dtype != np.int64 or offsets.shape != (count + 1,):
            raise ValueError(f"columns/{name}.offsets.npy does not match {count} values")
        if offsets[0] != 0 or offsets[-1] != rows or np.any(np.diff(offsets) < 0):
            raise ValueError(f"columns/{name}.offsets.npy does not cover {rows} rows")
        _check_rows(arrays[f"{name}.rows"], f"{name}.rows", rows, rows)
    dated = len(arrays["date.rows"])
    _check_rows(arrays["date.rows"], "date.rows", dated, rows)
    days = arrays["date.days"]
    if days.dtype != np.int32 or days.shape != (dated,) or np.any(np.diff(days) < 0):
        raise ValueError("columns/date.days.npy is not sorted days for every dated row")
    if arrays["position"].dtype != np.int32 or arrays["position"].shape != (rows,):
        raise ValueError(f"columns/position.npy does not hold {rows} rows")
    return arrays


def _check_rows(array: np.ndarray, name: str, length: int, rows: int) -> None:
    if array.dtype != np.int32 or array.shape != (length,):
        raise ValueError(f"columns/{name}.npy holds {array.dtype} {array.shape}, not {length}")
    if length and (array.min() < 0 or array.max() >= rows):
        raise ValueError(f"columns/{name}.npy names rows outside the index")


class _Row:
    """One distinct value dressed as a chunk, so the reference predicates judge it."""

    def __init__(self, **fields: Any) -> None:
        self.access: Any = None
        self.source = ""
        self.section = ""
        self.date: str | None = None
        self.metadata: Any = {}
        self.__dict__.update(fields)


_ONLY: dict[str, dict[str, Any]] = {
    "source": {"section": None, "date_from": None, "date_to": None, "metadata": {}},
    "section": {"source": None, "date_from": None, "date_to": None, "metadata": {}},
    "metadata": {"source": None, "section": None, "date_from": None, "date_to": None},
}
"""Per column, the fields to clear so a copy of the filters keeps only that one condition."""


class MaskColumns:
    """Caller and filter masks from the columns. `values(name)` reads a column's distinct
    values (decoded JSON); each is read once, on first use, and shared by every query.

    The reference per-chunk checks (`caller.may_see`, `filters.matches`) are evaluated on
    each distinct value with only that one condition set, so the mask agrees with them by
    construction; tests check that it does for every combination."""

    def __init__(self, arrays: dict[str, np.ndarray], values: Callable[[str], list[Any]]) -> None:
        self.rows = len(arrays["position"])
        self.position = arrays["position"]
        self._arrays = arrays
        self._read_values = values
        self._values: dict[str, list[Any]] = {}
        self._masks: OrderedDict[Any, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()

    def values(self, name: str) -> list[Any]:
        with self._lock:
            if name not in self._values:
                values = self._read_values(name)
                if len(values) != len(self._arrays[f"{name}.offsets"]) - 1:
                    raise ValueError(f"the {name} values do not match the column")
                self._values[name] = values
            return self._values[name]

    def mask(self, caller: Any, filters: Any = None) -> np.ndarray:
        """Rows the caller may see that pass the filters (a `Filters`, or None), as a
        read-only array. Each (caller, filters) pair's mask is built once per index version
        and kept (least recently used first out), so a caller's repeat queries cost a look-up,
        and a new pair costs a few array operations over masks that are cached as well."""
        key = ("mask", caller, None if filters is None else _encode(asdict(filters)))
        return self._cached(key, partial(self._combined, caller, filters))

    def _combined(self, caller: Any, filters: Any) -> np.ndarray:
        mask = self._cached(("caller", caller), lambda: self._access_mask(caller))
        if filters is None:
            return mask
        mask = mask.copy()
        for name in ("source", "section", "metadata"):
            if getattr(filters, name):
                single = replace(filters, **_ONLY[name])
                key = (name, _encode(getattr(filters, name)))
                mask &= self._cached(key, partial(self._value_mask, name, single))
        if filters.date_from or filters.date_to:
            mask &= self._date_mask(filters.date_from, filters.date_to)
        return mask

    def _cached(self, key: Any, build: Callable[[], np.ndarray]) -> np.ndarray:
        with self._lock:
            if key in self._masks:
                self._masks.move_to_end(key)
                return self._masks[key]
        mask = build()
        mask.setflags(write=False)
        with self._lock:
            self._masks[key] = mask
            while len(self._masks) > CACHED_MASKS:
                self._masks.popitem(last=False)
        return mask

    def _access_mask(self, caller: Any) -> np.ndarray:
        values = self.values("access")
        passes = np.fromiter(
            (caller.may_see(_Row(access=value)) for value in values), dtype=bool, count=len(values)
        )
        return self._rows_of("access", passes)

    def _value_mask(self, name: str, single: Any) -> np.ndarray:
        values = self.values(name)
        if name == "source" and all(isinstance(v, str) for v in values):
            # `fnmatchcase` is this compiled pattern's match; one compile, not one per value
            match = re.compile(fnmatch.translate(single.source)).match
            passes = np.fromiter((match(v) is not None for v in values), bool, len(values))
        else:
            passes = np.fromiter(
                (single.matches(_Row(**{name: value})) for value in values), bool, len(values)
            )
        return self._rows_of(name, passes)

    def _rows_of(self, name: str, passes: np.ndarray) -> np.ndarray:
        """Mask of the rows whose value passes: set the passing rows or clear the failing
        ones, whichever are fewer."""
        offsets = self._arrays[f"{name}.offsets"]
        rows = self._arrays[f"{name}.rows"]
        counts = np.diff(offsets)
        selected = int(counts[passes].sum())
        fill = selected > self.rows // 2
        mask = np.full(self.rows, fill, dtype=bool)
        chosen = ~passes if fill else passes
        picked = np.flatnonzero(chosen & (counts > 0))
        if len(picked) <= 64:
            for value in picked.tolist():
                mask[rows[offsets[value] : offsets[value + 1]]] = not fill
        else:
            mask[rows[np.repeat(chosen, counts)]] = not fill
        return mask

    def _date_mask(self, date_from: str | None, date_to: str | None) -> np.ndarray:
        days = self._arrays["date.days"]
        low = np.searchsorted(days, _filter_days(date_from), "left") if date_from else 0
        high = np.searchsorted(days, _filter_days(date_to), "right") if date_to else len(days)
        mask = np.zeros(self.rows, dtype=bool)
        mask[self._arrays["date.rows"][low:high]] = True
        return mask


def _filter_days(value: str) -> int:
    return (require_date(value) - _EPOCH).days
