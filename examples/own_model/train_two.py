"""Train two TinyNets (seeds 1 and 2) on digits in a few seconds; save a.safetensors and
b.safetensors into the folder given (default: the current one).

Plain PyTorch: your own training loop, your own model (model.py); lmc is used only to load the
bundled digits, so ``--data digits`` later gives the models the same normalised inputs.

    python examples/own_model/train_two.py [OUT_DIR]
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from model import make  # model.py beside this script
from safetensors.torch import save_file

import lmc.data


def train(seed: int, data, steps: int = 400, batch: int = 64):
    torch.manual_seed(seed)  # seeds the initialisation and the batch order
    model = make()
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    n = len(data.y_train)
    for _ in range(steps):
        idx = torch.randint(0, n, (batch,))
        loss = torch.nn.functional.cross_entropy(model(data.x_train[idx]), data.y_train[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    with torch.no_grad():
        acc = (model(data.x_test).argmax(1) == data.y_test).float().mean().item()
    return model, acc


def main(out: Path) -> None:
    data = lmc.data.load("digits")
    out.mkdir(parents=True, exist_ok=True)
    for name, seed in (("a", 1), ("b", 2)):
        model, acc = train(seed, data)
        save_file(model.state_dict(), str(out / f"{name}.safetensors"))
        print(f"{out / f'{name}.safetensors'}: seed {seed}, test accuracy {acc:.3f}")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path("."))
