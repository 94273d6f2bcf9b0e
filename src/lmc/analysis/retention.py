"""Initialisation retention: how much of a run's initial weights W_0 its final weights W_T keep.

Definitions (docs/science.md, "Initialisation retention"). A weight is any floating tensor of
two or more dimensions (Linear and Embedding weights, conv kernels read as (out, in · k · k),
position embeddings); inner products are Frobenius, in float64.

- ``init_coef`` = ⟨W_T, W_0⟩ / ‖W_0‖²: the coefficient of W_0 in W_T (1 for W_T = W_0; c for
  W_T = c·W_0 + a part orthogonal to W_0). NaN for W_0 = 0.
- ``init_share`` = ‖proj_{W_0} W_T‖ / ‖W_T‖ = |⟨W_T, W_0⟩| / (‖W_0‖ ‖W_T‖), in [0, 1]: the
  fraction of W_T's norm along W_0. NaN when either is 0.
- Per pair (A, B, with B in the frame it is merged in, e.g. permuted onto A, and B_0 permuted
  alike): the *shared subspace* of a layer is spanned by the top-k left singular vectors U_k
  and top-k right singular vectors V_k of A_T + B_T (the midpoint merge's matrix, times 2:
  directions where the two agree add up, those where they differ cancel), with
  k = ⌈stable rank of A_T + B_T⌉ = ⌈‖M‖_F² / ‖M‖_2²⌉ unless given. ``init_shared_energy`` of an
  endpoint = ‖U_kᵀ W_0 V_k‖_F² / ‖W_0‖_F², the fraction of its initial matrix's energy inside
  that subspace (both sides); ``init_shared_chance`` = k² / (rows · cols), its expectation for
  a W_0 with i.i.d. entries independent of the subspace.

The decay budget of a run is Σ_t lr_t · wd over every optimizer step t of its schedule
(training records it in ``metrics.json`` as ``decay_budget``; :func:`decay_budget` computes it
from a config, for runs trained before that). What weight decay alone does to W_0 per optimiser
(:func:`decay_factor`, the factor it would leave with zero gradients):

- ``sgd`` (coupled L2: wd · W joins the gradient): without momentum W ← (1 − lr_t·wd) W, so
  the factor is ∏_t (1 − lr_t·wd) ≈ exp(−budget); with heavy-ball momentum μ the decay term
  passes through the momentum buffer (v ← μ v + wd · W, W ← W − lr_t v), which multiplies the
  decay by about 1 / (1 − μ): factor ≈ exp(−budget / (1 − μ)), computed exactly by that
  recursion.
- ``adamw`` (decoupled): W ← (1 − lr_t·wd) W before each Adam update: factor ∏_t (1 − lr_t·wd)
  ≈ exp(−budget), exactly.
- ``adam`` (coupled L2 through the adaptive step): the decay is divided by √v̂ per coordinate,
  so no factor follows from the schedule (``None``); the budget is nominal.

Initial weights are never stored: :func:`initial_state` rebuilds them bit for bit from a
training run's config (its model, options and ``init_seed``), as training built them.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from typing import Any

import torch

from lmc.config import LmcError
from lmc.store import Run
from lmc.train import TrainSettings, learning_rate, settings_of

from .accumulators import to_stat
from .spectra import stable_rank, svd_ready, weight_matrix

StateDict = Mapping[str, torch.Tensor]

#: The record keys of the layerwise analysis that hold retention (``None`` without init states).
RETENTION_KEYS = (
    "init_coef_a",
    "init_coef_b",
    "init_share_a",
    "init_share_b",
    "init_shared_energy_a",
    "init_shared_energy_b",
    "init_shared_rank",
    "init_shared_chance",
)

#: How the shared subspace's dimension is chosen when not given (recorded in settings).
SHARED_RANK_RULE = "ceil(stable rank of A_T + B_T)"


# ---------------------------------------------------------------------------------------------
# one matrix


def is_weight(tensor: torch.Tensor) -> bool:
    """Whether retention is measured for ``tensor``: floating, with two or more dimensions."""
    return tensor.is_floating_point() and tensor.dim() >= 2


def _check_pair(final: torch.Tensor, init: torch.Tensor, name: str) -> None:
    if tuple(final.shape) != tuple(init.shape):
        raise LmcError(
            f"{name}: the initial weight has shape {list(init.shape)} but the final one "
            f"{list(final.shape)}: the initial state is of another architecture"
        )


@torch.no_grad()
def init_retention(final: torch.Tensor, init: torch.Tensor, name: str = "weight") -> dict:
    """``{"init_coef", "init_share", "init_norm", "final_norm"}`` of one weight (module doc):
    ⟨W_T, W_0⟩ / ‖W_0‖², |⟨W_T, W_0⟩| / (‖W_0‖ ‖W_T‖) and the two Frobenius norms, in float64.
    ``init`` is moved to ``final``'s device. A shape mismatch is an ``LmcError``."""
    _check_pair(final, init, name)
    w_t = to_stat(final.detach()).reshape(-1)
    w_0 = to_stat(init.detach()).to(w_t.device).reshape(-1)
    dot = float((w_t * w_0).sum())
    init_sq, final_sq = float((w_0 * w_0).sum()), float((w_t * w_t).sum())
    return {
        "init_coef": dot / init_sq if init_sq > 0 else math.nan,
        "init_share": abs(dot) / math.sqrt(init_sq * final_sq)
        if init_sq > 0 and final_sq > 0
        else math.nan,
        "init_norm": math.sqrt(init_sq),
        "final_norm": math.sqrt(final_sq),
    }


@torch.no_grad()
def shared_energy(
    final_a: torch.Tensor,
    final_b: torch.Tensor,
    init_a: torch.Tensor,
    init_b: torch.Tensor,
    rank: int | None = None,
    name: str = "weight",
) -> dict[str, Any]:
    """``{"init_shared_energy_a", "init_shared_energy_b", "init_shared_rank",
    "init_shared_chance"}`` of one layer of a pair (module doc): the fraction of each W_0's
    energy inside the top-``rank`` left and right singular subspaces of A_T + B_T (default
    rank: ⌈its stable rank⌉). B_T and B_0 must be in the same frame (both permuted, or
    neither). NaN energies and rank ``None`` when A_T + B_T = 0."""
    for tensor in (final_b, init_a, init_b):
        _check_pair(final_a, tensor, name)
    m = svd_ready(weight_matrix(final_a) + weight_matrix(final_b).to(final_a.device))
    rows, cols = m.shape
    u, s, vh = torch.linalg.svd(m, full_matrices=False)
    s = s.to(torch.float64)
    nan = {"init_shared_energy_a": math.nan, "init_shared_energy_b": math.nan}
    if s.numel() == 0 or float(s[0]) <= 0:
        return {**nan, "init_shared_rank": None, "init_shared_chance": math.nan}
    if rank is None:
        rank = math.ceil(stable_rank(s.cpu().numpy()) - 1e-9)
    if not isinstance(rank, int) or isinstance(rank, bool) or rank < 1:
        raise LmcError(f"rank must be a positive integer, got {rank!r}")
    k = min(rank, int(s.numel()))
    u_k, v_k = u[:, :k], vh[:k].T
    out: dict[str, Any] = {}
    for side, init in (("a", init_a), ("b", init_b)):
        x = weight_matrix(init).to(m.device, m.dtype)
        block = to_stat(u_k.T @ x @ v_k)
        x64 = to_stat(x)
        total = float((x64 * x64).sum())
        out[f"init_shared_energy_{side}"] = (
            float((block * block).sum()) / total if total else math.nan
        )
    out["init_shared_rank"] = k
    out["init_shared_chance"] = k * k / (rows * cols)
    return out


def layer_retention(
    final_a: torch.Tensor,
    final_b: torch.Tensor,
    init_a: torch.Tensor,
    init_b: torch.Tensor,
    rank: int | None = None,
    name: str = "weight",
) -> dict[str, Any]:
    """The :data:`RETENTION_KEYS` of one layer of a pair: each endpoint's ``init_coef`` and
    ``init_share`` and the :func:`shared_energy` terms (B and B_0 in one frame)."""
    out: dict[str, Any] = {}
    for side, final, init in (("a", final_a, init_a), ("b", final_b, init_b)):
        one = init_retention(final, init, name)
        out[f"init_coef_{side}"], out[f"init_share_{side}"] = one["init_coef"], one["init_share"]
    out.update(shared_energy(final_a, final_b, init_a, init_b, rank, name))
    return out


# ---------------------------------------------------------------------------------------------
# state dicts


def _init_of(init_state: StateDict, name: str) -> torch.Tensor:
    if name not in init_state:
        raise LmcError(f"the initial state has no {name!r}: it is of another architecture")
    return init_state[name]


def state_retention(final_state: StateDict, init_state: StateDict) -> dict[str, dict[str, float]]:
    """Per weight of ``final_state`` (every floating tensor with ≥ 2 dimensions, state order):
    :func:`init_retention` against the same name in ``init_state``."""
    return {
        name: init_retention(tensor, _init_of(init_state, name), name)
        for name, tensor in final_state.items()
        if is_weight(tensor)
    }


def pair_retention(
    state_a: StateDict,
    state_b: StateDict,
    init_a: StateDict,
    init_b: StateDict,
    rank: int | None = None,
) -> dict[str, dict[str, Any]]:
    """Per weight: :func:`layer_retention` (keys :data:`RETENTION_KEYS`). ``state_b`` and
    ``init_b`` must be in one frame: align B's final state and permute its initial state
    with the same permutation (``lmc.perm.apply_permutation``), or neither."""
    out = {}
    for name, final_a in state_a.items():
        if is_weight(final_a):
            out[name] = layer_retention(
                final_a,
                _init_of(state_b, name),
                _init_of(init_a, name),
                _init_of(init_b, name),
                rank,
                name,
            )
    return out


# ---------------------------------------------------------------------------------------------
# runs: rebuilt initial weights and the decay budget


def _train_config(config: Mapping[str, Any], what: str) -> None:
    kind = config.get("kind", "train") if isinstance(config, Mapping) else None
    if kind != "train" or not isinstance(config.get("train"), Mapping):
        raise LmcError(
            f"{what} needs a training run's config (kind 'train'), not a {kind!r} run: "
            "aligned and merged runs have no initialisation of their own"
        )


def can_rebuild_init(config: Mapping[str, Any]) -> bool:
    """Whether :func:`initial_state` can rebuild this run's initial weights (a training run,
    plain or spawned)."""
    try:
        _train_config(config, "")
    except LmcError:
        return False
    return True


def initial_state(config: Mapping[str, Any]) -> dict[str, torch.Tensor]:
    """The initial state (parameters and buffers, CPU) of the training run ``config``,
    rebuilt bit for bit as training builds it: ``lmc.models.build(model, seed=init_seed,
    **model_options)``. A spawned run's is its parent's (the same ``init_seed``). Another kind
    of run (aligned, merged) is an ``LmcError``."""
    from lmc.models import build

    _train_config(config, "rebuilding the initial weights")
    settings = settings_of(dict(config))
    model = build(config["model"], seed=settings.init_seed, **config["model_options"])
    return {name: value.detach().clone() for name, value in model.state_dict().items()}


def train_size_of(
    config: Mapping[str, Any],
    train_size: int | None = None,
    *,
    data_dir: str | os.PathLike | None = None,
) -> int:
    """Training examples of the run ``config``: ``train_size`` if given, else read by loading
    its dataset (with its ``dataset_options``; nothing is downloaded)."""
    if train_size is None:
        from lmc.data import load

        data = load(config["dataset"], data_dir=data_dir, **config.get("dataset_options", {}))
        train_size = len(data.x_train)
    if isinstance(train_size, bool) or not isinstance(train_size, int) or train_size < 1:
        raise LmcError(f"train_size must be a positive integer, got {train_size!r}")
    return train_size


def _epoch_settings(config: Mapping[str, Any]) -> list[TrainSettings]:
    """The settings each epoch of the run trains with: a spawned run's first K epochs are its
    parent's (the trunk), the rest its own."""
    own = settings_of(dict(config))
    spawn = config["train"].get("spawn")
    if spawn is None:
        return [own] * own.epochs
    parent = settings_of(spawn["parent"])
    return [parent if epoch < spawn["epoch"] else own for epoch in range(own.epochs)]


def step_learning_rates(config: Mapping[str, Any], train_size: int) -> list[list[float]]:
    """Per epoch, the learning rate of each optimizer step, as ``lmc.train.fit`` sets them:
    ``steps_per_epoch = train_size // min(batch_size, train_size)`` (the last partial batch is
    dropped), global step ``epoch · steps_per_epoch + i``."""
    _train_config(config, "the learning-rate schedule")
    out = []
    for epoch, settings in enumerate(_epoch_settings(config)):
        steps = train_size // min(settings.batch_size, train_size)
        out.append([learning_rate(settings, epoch * steps + i, steps) for i in range(steps)])
    return out


def decay_budget(
    config: Mapping[str, Any],
    train_size: int | None = None,
    *,
    data_dir: str | os.PathLike | None = None,
) -> float:
    """Σ_t lr_t · wd over every step of the training run ``config`` (its schedule's per-step
    rates, :func:`step_learning_rates`; ``train_size`` as :func:`train_size_of`). Summed as
    training sums it (per epoch Σ lr_t, times that epoch's wd, added epoch by epoch), so it
    equals the ``decay_budget`` a run records in ``metrics.json`` bit for bit."""
    size = train_size_of(config, train_size, data_dir=data_dir)
    total = 0.0
    for rates, settings in zip(step_learning_rates(config, size), _epoch_settings(config)):
        lr_sum = 0.0
        for lr in rates:
            lr_sum += lr
        total += lr_sum * settings.weight_decay
    return total


def decay_factor(
    config: Mapping[str, Any],
    train_size: int | None = None,
    *,
    data_dir: str | os.PathLike | None = None,
) -> float | None:
    """The factor weight decay alone leaves on W_0 at the end of the run ``config`` (zero
    gradients; module doc): SGD's momentum recursion v ← μv + wd·w, w ← w − lr_t·v from w = 1,
    v = 0; AdamW's ∏_t (1 − lr_t·wd); ``None`` for Adam (coupled L2 through √v̂)."""
    size = train_size_of(config, train_size, data_dir=data_dir)
    w, v = 1.0, 0.0
    for rates, settings in zip(step_learning_rates(config, size), _epoch_settings(config)):
        wd, mu = settings.weight_decay, settings.momentum
        if settings.optimizer == "adam":
            return None
        for lr in rates:
            if settings.optimizer == "adamw":
                w *= 1.0 - lr * wd
            else:
                v = mu * v + wd * w
                w -= lr * v
    return w


def run_decay(run: Run, train_size: int | None = None, **options: Any) -> dict[str, Any]:
    """``{"optimizer", "weight_decay", "momentum", "decay_budget", "decay_budget_source",
    "decay_factor"}`` of a stored training run: the budget its ``metrics.json`` recorded
    (source ``metrics``) or, for a run trained before lmc recorded it, computed from its config
    (source ``config``); the decay-only factor from its config."""
    config = run.config
    _train_config(config, f"the decay budget of {run.name}")
    size = train_size_of(config, train_size, **options)
    settings = settings_of(config)
    recorded = run.metrics.get("decay_budget") if isinstance(run.metrics, Mapping) else None
    return {
        "optimizer": settings.optimizer,
        "weight_decay": settings.weight_decay,
        "momentum": settings.momentum,
        "decay_budget": recorded if recorded is not None else decay_budget(config, size),
        "decay_budget_source": "metrics" if recorded is not None else "config",
        "decay_factor": decay_factor(config, size),
    }


def run_retention(run: Run, train_size: int | None = None, **options: Any) -> dict[str, Any]:
    """Retention of a stored training run: :func:`run_decay`'s keys plus ``layers``, its
    :func:`init_retention` per weight (W_0 rebuilt from its config, W_T its stored state).
    ``options``: ``data_dir`` for reading the training-set size when ``train_size`` is not
    given."""
    layers = state_retention(run.state_dict(), initial_state(run.config))
    return {"run": run.name, **run_decay(run, train_size, **options), "layers": layers}


__all__ = [
    "RETENTION_KEYS",
    "SHARED_RANK_RULE",
    "can_rebuild_init",
    "decay_budget",
    "decay_factor",
    "init_retention",
    "initial_state",
    "is_weight",
    "layer_retention",
    "pair_retention",
    "state_retention",
    "run_decay",
    "run_retention",
    "shared_energy",
    "step_learning_rates",
    "train_size_of",
]
