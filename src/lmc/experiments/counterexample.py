"""Git Re-Basin's counterexample (App. A.6): two perfect solutions no permutation connects.

Task: ``x ~ U([-1, 1]^2)`` (seeded), ``y = 1[x_1 < 0 and x_2 > 0]`` (class 1 is the open
upper-left quadrant). Model: the zoo MLP with input size 2, two hidden layers of two ReLU
units and 2 classes (``lmc.models.build("mlp", input_size=2, width=2, depth=2,
num_classes=2)``).

The two hand-built solutions both compute ``logit_1 - logit_0 = k * min(u, c)`` where the
first hidden layer *tests* one condition with a ReLU and the second layer tests the other:

- A tests ``x_1 < 0`` in layer 1: ``u = ReLU(-x_1)``, and passes ``x_2`` on as
  ``ReLU(x_2 + 1) = x_2 + 1``; layer 2 tests ``x_2 > 0`` against it: ``p = ReLU(x_2 - u)``,
  ``q = x_2 + 1``, and ``logit_1 = k (q - 1 - p) = k min(u, x_2)``.
- B is the same with the conditions in the opposite layers: ``u = ReLU(x_2)``, ``-x_1`` passed
  on as ``ReLU(1 - x_1)``, ``logit_1 = k min(u, -x_1)``.

``logit_0 = 0``. ``min(u, c) > 0`` exactly on the class-1 quadrant and is exactly ``0`` (a
tie, and ``argmax`` picks class 0) or negative elsewhere; ``k`` is a power of two
(:data:`SCALE`), so the ties are computed without rounding (``x + 1 - 1`` is exact by
Sterbenz's lemma and multiplying by ``k`` is exact): both solutions classify every sampled
point correctly (except with probability ~1e-7 per point, when a coordinate is within float32
rounding of 0). The tied quadrant ``x_1 >= 0, x_2 > 0`` has loss ``log 2``, so the endpoint
losses are not 0.

The paths: for every one of the ``2! * 2! = 4`` permutations pi of B's hidden units
(``lmc.perm`` applies them, so pi(B) computes B's function), the loss and accuracy of
theta(lam) = (1 - lam) theta_A + lam pi(theta_B) on the data, and their barriers
(:mod:`lmc.metrics.barriers`: Git Re-Basin's ``max_minus_mean_loss``, Frankle et al.'s
``loss_barrier``, ``accuracy_barrier``). The paper's claim (C4): all four are positive.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from lmc.config import LmcError, check_int, check_number
from lmc.data.tasks import CLASSIFICATION, Task
from lmc.merge import lerp
from lmc.metrics import accuracy_barrier, lambda_grid, loss_barrier, max_minus_mean_loss
from lmc.models import build

#: The logit scale k of both solutions (a power of two: the class ties are exact).
SCALE = 8.0
#: The architecture: zoo MLP options.
MODEL_OPTIONS = {"input_size": 2, "num_classes": 2, "width": 2, "depth": 2, "bias": True}


def counterexample_data(n: int = 4096, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """``(x, y)``: ``x`` float32 (n, 2) uniform on [-1, 1]^2 from
    ``torch.Generator().manual_seed(seed)``, ``y`` int64 (n,) = 1[x_1 < 0 and x_2 > 0]."""
    n = check_int("n", n, minimum=1)
    seed = check_int("seed", seed, minimum=0)
    x = torch.rand(n, 2, generator=torch.Generator().manual_seed(seed)) * 2 - 1
    y = ((x[:, 0] < 0) & (x[:, 1] > 0)).long()
    return x, y


def _solution(first: str, scale: float) -> nn.Module:
    model = build("mlp", **MODEL_OPTIONS)
    if first == "x1":  # layer 1: u = ReLU(-x1), x2 + 1 passed on
        w1 = [[-1.0, 0.0], [0.0, 1.0]]
    else:  # layer 1: u = ReLU(x2), 1 - x1 passed on
        w1 = [[0.0, 1.0], [-1.0, 0.0]]
    state = {
        "fc1.weight": torch.tensor(w1),
        "fc1.bias": torch.tensor([0.0, 1.0]),
        # p = ReLU(h1 - 1 - h0) (the second test), q = ReLU(h1) = h1 (the pass-through)
        "fc2.weight": torch.tensor([[-1.0, 1.0], [0.0, 1.0]]),
        "fc2.bias": torch.tensor([-1.0, 0.0]),
        # logit_0 = 0, logit_1 = k (q - 1 - p) = k min(u, passed - 1)
        "out.weight": torch.tensor([[0.0, 0.0], [-scale, scale]]),
        "out.bias": torch.tensor([0.0, -scale]),
    }
    model.load_state_dict(state)
    return model.eval()


def counterexample_solutions(scale: float = SCALE) -> tuple[nn.Module, nn.Module]:
    """``(A, B)``: the two hand-built perfect solutions (module docstring), zoo MLPs in eval
    mode. ``scale`` is k; keep it a power of two for exact ties."""
    scale = check_number("scale", scale, positive=True)
    return _solution("x1", scale), _solution("x2", scale)


def hidden_permutations(model: nn.Module) -> list[dict[str, torch.Tensor]]:
    """Every permutation of the hidden units of an MLP (one group per hidden layer), in
    lexicographic order of the groups' index tuples: ``prod_l (width_l)!`` of them."""
    from lmc.perm import spec_from_model

    spec = spec_from_model(model, torch.zeros(2, MODEL_OPTIONS["input_size"]))
    groups = sorted(spec.group_sizes.items())
    choices = [list(itertools.permutations(range(n))) for _, n in groups]
    return [
        {g: torch.tensor(p, dtype=torch.int64) for (g, _), p in zip(groups, combo)}
        for combo in itertools.product(*choices)
    ]


@dataclass(frozen=True)
class PermutedPath:
    """The path from A to pi(B) for one permutation pi of B's hidden units.

    ``perm``: group -> index tensor (new unit i = old unit perm[i]); ``lambdas``, ``loss``
    (mean cross-entropy, nats) and ``accuracy`` (fraction) per lambda; the barriers.
    """

    perm: dict[str, torch.Tensor]
    lambdas: list[float]
    loss: list[float]
    accuracy: list[float]

    @property
    def label(self) -> str:
        return ", ".join(
            f"{g}=({','.join(str(int(i)) for i in p)})" for g, p in sorted(self.perm.items())
        )

    @property
    def max_minus_mean_loss(self) -> float:
        """Git Re-Basin's barrier: max_lam L(lam) - (L_0 + L_1) / 2."""
        return max_minus_mean_loss(self.lambdas, self.loss)

    @property
    def loss_barrier(self) -> float:
        """max_lam [L(lam) - ((1 - lam) L_0 + lam L_1)]."""
        return loss_barrier(self.lambdas, self.loss)

    @property
    def accuracy_barrier(self) -> float:
        """max_lam [((1 - lam) A_0 + lam A_1) - A(lam)]."""
        return accuracy_barrier(self.lambdas, self.accuracy)


@torch.no_grad()
def _evaluate(
    model: nn.Module, x: torch.Tensor, y: torch.Tensor, task: Task = CLASSIFICATION
) -> tuple[float, float]:
    """The task's mean loss (nats) and accuracy (fraction) of ``model`` on ``(x, y)``, from
    float64 logits (the counterexample is a classification task)."""
    logits = model(x).double()
    return task.loss(logits, y).item(), task.accuracy(logits, y)


@torch.no_grad()
def counterexample_paths(
    n: int = 4096, seed: int = 0, lambdas: Any = 21, scale: float = SCALE
) -> list[PermutedPath]:
    """The four paths A -> pi(B), one per permutation of B's hidden units.

    ``n``, ``seed``: the data (:func:`counterexample_data`); ``lambdas``: a number of evenly
    spaced points or a list (:func:`lmc.metrics.lambda_grid`: 0, ½ and 1 always included);
    ``scale``: k of both solutions.
    """
    from lmc.perm import apply_permutation, spec_from_model

    x, y = counterexample_data(n, seed)
    grid, _ = lambda_grid(lambdas)
    model_a, model_b = counterexample_solutions(scale)
    spec = spec_from_model(model_b, x[:2])
    state_a = model_a.state_dict()
    work = build("mlp", **MODEL_OPTIONS).eval()
    paths = []
    for perm in hidden_permutations(model_b):
        state_b = apply_permutation(spec, perm, model_b.state_dict())
        losses, accs = [], []
        for lam in grid:
            work.load_state_dict(lerp(state_a, state_b, lam))
            loss, acc = _evaluate(work, x, y)
            losses.append(loss)
            accs.append(acc)
        paths.append(PermutedPath(perm, list(grid), losses, accs))
    return paths


def draw_counterexample_paths(ax: Any, paths: list[PermutedPath], metric: str = "loss") -> Any:
    """Draw ``metric`` (``loss`` or ``accuracy``) along every path into the matplotlib Axes
    ``ax`` (no pyplot state), one line per permutation labelled with it and its barrier;
    lambda = 0 (A) on the left. Returns ``ax``."""
    if metric not in ("loss", "accuracy"):
        raise LmcError(f"metric must be 'loss' or 'accuracy', got {metric!r}")
    if not hasattr(ax, "plot"):
        raise LmcError(f"ax must be a matplotlib Axes, got {type(ax).__name__}")
    if not paths:
        raise LmcError("draw_counterexample_paths needs at least one path")
    for path in paths:
        values = np.asarray(getattr(path, metric))
        barrier = path.max_minus_mean_loss if metric == "loss" else path.accuracy_barrier
        ax.plot(path.lambdas, values, marker="o", markersize=3,
                label=f"{path.label}: barrier {barrier:.3f}")  # fmt: skip
    ax.set_xlim(0, 1)
    ax.set_xlabel("λ  (θ(λ) = (1 − λ)θ_A + λ·π(θ_B))")
    ax.set_ylabel("loss (nats)" if metric == "loss" else "accuracy")
    ax.set_title("Git Re-Basin counterexample: every permutation leaves a barrier")
    ax.legend(frameon=False, fontsize="small")
    return ax
