"""The judge: Footnote's own cross-encoder, scoring how well a passage answers a question.

A bi-encoder compares two vectors made apart, so it cannot tell "How much annual leave?" from
"How much parental leave?" against the annual-leave section (issue 41 measured AUC 0.67). A
cross-encoder reads the question and the passage together. This one was trained by
training/judge/ (MiniLM fine-tuned on Debian-shipped manuals, WordNet near misses) and ships as
an ONNX file run on onnxruntime + tokenizers: no torch in the product.

The model file is untrusted until checked: its size and sha256 must match MANIFEST.json beside
it, and the bytes that were checked are the bytes loaded, so a tampered or truncated file is
refused with one clear error and never reaches onnxruntime.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import re
import threading
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

JUDGE_DIR = Path(str(resources.files("footnote.models") / "data" / "judge"))
TOKENIZER = "minilm_tokenizer.json"
INPUTS = ("input_ids", "attention_mask", "token_type_ids")
SAFE_FILE_NAME = re.compile(r"[A-Za-z0-9_.-]+\.onnx")
BATCH_SIZE = 16
"""Pairs per onnxruntime run for an fp32 file. An int8 file runs one pair at a time: its
activations are quantised at run time with one scale for the whole input tensor, so in a batch a
pair's logit would depend on the pairs beside it (by a median 0.09 logit, up to 2.5, over 600
held-out pairs in batches of 16). One pair per run is no slower on 2 cores (docs/evaluation.md,
"The judge in int8, per channel")."""


class JudgeModelError(RuntimeError):
    """The judge's model is missing, damaged, or not the file its manifest names."""


def _read_manifest(directory: Path) -> dict[str, Any]:
    path = directory / "MANIFEST.json"
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise JudgeModelError(f"cannot read the judge's manifest {path}: {exc}") from None
    valid = (
        isinstance(manifest, dict)
        and isinstance(manifest.get("file"), str)
        and SAFE_FILE_NAME.fullmatch(manifest["file"]) is not None
        and isinstance(manifest.get("sha256"), str)
        and re.fullmatch(r"[0-9a-f]{64}", manifest["sha256"]) is not None
        and isinstance(manifest.get("size"), int)
        and isinstance(manifest.get("max_length"), int)
        and 16 <= manifest["max_length"] <= 512
    )
    if not valid:
        raise JudgeModelError(f"the judge's manifest {path} is malformed: refusing the model")
    return manifest


def verified_model(directory: Path) -> tuple[bytes, dict[str, Any]]:
    """The model's bytes and manifest, once the bytes match the manifest's size and sha256."""
    manifest = _read_manifest(directory)
    path = directory / manifest["file"]
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise JudgeModelError(f"cannot read the judge model {path}: {exc}") from None
    if len(data) != manifest["size"] or hashlib.sha256(data).hexdigest() != manifest["sha256"]:
        raise JudgeModelError(
            f"the judge model {path} does not match the checksum in its MANIFEST.json "
            "(tampered with or truncated): refusing to load it; reinstall footnote-rag"
        )
    return data, manifest


class Judge:
    """Scores (question, passage) pairs: a logit, higher when the passage answers.

    Deterministic: pairs are scored in a fixed order (shortest first, ties in the given order)
    in fixed-size batches on a fixed thread count, so the same input gives identical scores;
    and a pair's score does not depend on the others scored with it.
    """

    def __init__(self, directory: Path | None = None, threads: int = 2) -> None:
        import onnxruntime as ort
        from tokenizers import Tokenizer

        data, self.manifest = verified_model(directory or JUDGE_DIR)
        spec = (resources.files("footnote.models") / "data" / TOKENIZER).read_text("utf-8")
        self._tokenizer = Tokenizer.from_str(spec)
        self._tokenizer.enable_truncation(
            max_length=self.manifest["max_length"], strategy="only_second"
        )
        self._tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.log_severity_level = 3
        try:
            self._session = ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])
        except Exception as exc:  # onnxruntime raises its own untyped errors
            raise JudgeModelError(f"onnxruntime cannot load the judge model: {exc}") from None
        self._lock = threading.Lock()
        quantised = str(self.manifest.get("weights", "fp32")).startswith("int8")
        self._batch_size = 1 if quantised else BATCH_SIZE

    def score_pairs(self, pairs: Sequence[tuple[str, str]]) -> np.ndarray:
        """One float32 logit per (question, passage) pair, in the pairs' order.

        The pairs are tokenized once, then run shortest first, each batch cut to its own
        longest pair: a batch of short chunks does not pay for one long chunk's padding
        (a search's candidates vary from a line to a full section)."""
        out = np.zeros(len(pairs), dtype=np.float32)
        if not pairs:
            return out
        with self._lock:  # the tokenizer's padding state is shared
            encoded = self._tokenizer.encode_batch(list(pairs))
        arrays = [
            np.array([getattr(e, attr) for e in encoded], dtype=np.int64)
            for attr in ("ids", "attention_mask", "type_ids")
        ]
        lengths = arrays[1].sum(axis=1)
        order = np.argsort(lengths, kind="stable")
        for start in range(0, len(pairs), self._batch_size):
            rows = order[start : start + self._batch_size]
            width = int(lengths[rows].max())
            feed = {name: array[rows, :width] for name, array in zip(INPUTS, arrays, strict=True)}
            out[rows] = self._session.run(["logit"], feed)[0]
        return out

    def score(self, question: str, passages: Sequence[str]) -> np.ndarray:
        """The question against each passage: one logit per passage."""
        return self.score_pairs([(question, passage) for passage in passages])


_LOADING = threading.Lock()


def load_judge() -> Judge:
    """The shipped judge, loaded (and verified) once per process. A caller that arrives while
    another thread is loading it (load_judge_early) waits for that load instead of making a
    second one."""
    with _LOADING:
        return _shipped_judge()


@functools.lru_cache(maxsize=1)
def _shipped_judge() -> Judge:
    return Judge()


def load_judge_early() -> None:
    """Start loading the shipped judge on a thread, for a process that will need it soon.

    Loading takes about 0.3 s (reading and checking 90 MB, then onnxruntime's session), and
    both steps release the GIL: started before a cold `footnote ask` imports the graph (a
    second of Python on one core), the load runs on the other core and is done by the time
    the grader asks for it. A failure is not reported here: the grader's own load_judge()
    meets it again and says what is wrong. The thread is not a daemon: a command that ends
    early (an index it cannot read) waits for the load to finish rather than tearing the
    interpreter down under onnxruntime while it builds a session."""
    threading.Thread(target=_load_quietly, name="footnote-judge-load").start()


def _load_quietly() -> None:
    with contextlib.suppress(JudgeModelError):
        load_judge()
