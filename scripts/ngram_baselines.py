"""Character n-gram baselines of a text study: what a model must beat to have learned more than
token frequencies.

For a study file's ``[data]`` (a text dataset: ``fortunes``, ``text``, ``tiny-shakespeare``),
fits an n-gram model of order 1 (unigram: p(token)) and 2 (bigram: p(token | previous token)) on
the training windows the study's models see (its ``train_size`` subset, every position of every
window: the pairs (x_t, y_t)), with add-k smoothing (k = 0.01 pseudo-counts per vocabulary
entry), and writes their next-token loss (nats per token, the models' loss) and accuracy (the
most probable token) on the study's evaluation split, one row per order:

    python scripts/ngram_baselines.py STUDY.toml OUT.csv [--data-dir DIR]

Columns: ``order``, ``loss``, ``accuracy``, ``tokens`` (test predictions), ``vocab``.
"""

from __future__ import annotations

import argparse
import csv
import math
import sys
from pathlib import Path

import tomllib
import torch

from lmc.data import load

SMOOTHING = 0.01


def ngram_scores(
    x_train: torch.Tensor,
    y_train: torch.Tensor,
    x_test: torch.Tensor,
    y_test: torch.Tensor,
    vocab: int,
    order: int,
    k: float = SMOOTHING,
) -> tuple[float, float]:
    """``(loss, accuracy)`` on (x_test, y_test) of an add-``k`` n-gram of ``order`` 1 or 2
    fitted on the (x_train, y_train) windows (shapes (N, T), token ids below ``vocab``): the
    mean negative log-probability of each test target in nats, and the fraction of targets
    that are the model's most probable token."""
    if order == 1:
        counts = torch.bincount(y_train.reshape(-1), minlength=vocab).double() + k
        logp = (counts / counts.sum()).log()
        scores = logp.expand(y_test.numel(), vocab)
    elif order == 2:
        pairs = x_train.reshape(-1) * vocab + y_train.reshape(-1)
        counts = torch.bincount(pairs, minlength=vocab * vocab).double().view(vocab, vocab) + k
        logp = (counts / counts.sum(1, keepdim=True)).log()
        scores = logp[x_test.reshape(-1)]
    else:
        raise ValueError(f"order must be 1 or 2, got {order}")
    targets = y_test.reshape(-1)
    loss = -scores.gather(1, targets[:, None]).mean().item()
    accuracy = (scores.argmax(1) == targets).double().mean().item()
    return loss, accuracy


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("study", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--data-dir", default=None)
    args = parser.parse_args(argv)
    study = tomllib.loads(args.study.read_text("utf-8"))
    data_table = study["data"]
    data = load(data_table["dataset"], data_dir=args.data_dir, **data_table.get("options", {}))
    x_test, y_test = data.split(data_table.get("split", "test"))
    rows = []
    for order in (1, 2):
        loss, accuracy = ngram_scores(
            data.x_train, data.y_train, x_test, y_test, data.num_classes, order
        )
        assert math.isfinite(loss)
        rows.append({"order": order, "loss": loss, "accuracy": accuracy,
                     "tokens": y_test.numel(), "vocab": data.num_classes})  # fmt: skip
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    for row in rows:
        print(f"order {row['order']}: {row['loss']:.4f} nats, accuracy {row['accuracy']:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
