"""Straight-through estimator matching (Git Re-Basin §3.3, Algorithm 2).

Learn θ̃ (initialised at θ_A). At every step

1. ``perm = weight_matching(θ̃, θ_B)``, warm-started from the previous step's permutation;
2. ``B' = π(θ_B)``; the projected parameters are ``B' + θ̃ − stopgrad(θ̃)``: their value is
   ``B'`` and their gradient flows to θ̃ (the straight-through estimator);
3. the midpoint ``½(θ_A + projected)`` is evaluated with ``torch.func.functional_call`` on a
   training batch, and θ̃ takes an Adam step on its cross-entropy (the task's loss,
   :mod:`lmc.data.tasks`: for ``next-token`` the mean over every position of the batch's
   windows).

Floating buffers (BatchNorm running statistics) of the midpoint are ``½(A + B')``; a model
with BatchNorm runs the midpoint in train mode (batch statistics, which is what a merged
BatchNorm network needs before its statistics are reset), any other model in eval mode.

The permutation kept is the best one seen, judged by the midpoint's cross-entropy on a fixed
held-out slice of ``inputs`` (never used for the steps). The candidates include step 0's
permutation, which is exactly weight matching's answer on (θ_A, θ_B) with the same seed (from
the identity start, with SciPy's solver), so the result is never worse than weight matching on
that criterion.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass, fields
from typing import Any

import torch
from torch import nn
from torch.func import functional_call

from lmc.config import LmcError, progress
from lmc.data.tasks import Task, get_task
from lmc.models import module_device, preserved_modes

from ..symmetries.permutation_spec import PermutationSpec
from ..symmetries.permutations import MatchResult, Perm, apply_permutation
from .registry import (
    AlignJob,
    AlignmentMethod,
    MethodOutput,
    MethodSetting,
    MethodStyle,
    register_method,
)
from .weight_matching import weight_matching


@dataclass(frozen=True, eq=False)
class SteMatchingResult(MatchResult):
    """What :func:`ste_matching` returns.

    ``perm``: the best permutation for B (lowest held-out midpoint loss); ``initial_loss``:
    the held-out midpoint loss at weight matching's permutation (step 0); ``best_loss`` and
    ``best_step``: the loss at ``perm`` and the step that found it (0: weight matching's);
    ``train_losses``: the midpoint's training loss at every step; ``candidates``: distinct
    permutations judged; ``holdout``: held-out examples; ``steps``: Adam steps taken;
    ``train_mode``: whether the midpoint ran in train mode (a model with BatchNorm).
    """

    initial_loss: float
    best_loss: float
    best_step: int
    train_losses: tuple[float, ...]
    candidates: int
    holdout: int
    steps: int
    train_mode: bool


def _key(perm: Perm) -> str:
    h = hashlib.sha256()
    for name in sorted(perm):
        h.update(name.encode())
        h.update(perm[name].cpu().numpy().tobytes())
    return h.hexdigest()


def holdout_split(
    inputs: torch.Tensor, labels: torch.Tensor, holdout: int | None, device: torch.device
) -> tuple[tuple[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]:
    """``((x_train, y_train), (x_hold, y_hold))`` on ``device``: the last ``holdout`` of the N
    (at least 2) examples held out (default ``min(1024, N // 5)``, kept within [1, N − 1]),
    the rest for training steps. Shared by STE and learned alignment."""
    n = int(inputs.shape[0])
    holdout = min(1024, n // 5) if holdout is None else holdout
    holdout = max(1, min(int(holdout), n - 1))
    inputs, labels = inputs.to(device), labels.to(device)
    return (inputs[: n - holdout], labels[: n - holdout]), (
        inputs[n - holdout :],
        labels[n - holdout :],
    )


def training_batches(
    n: int, batch_size: int, generator: torch.Generator, device: torch.device
) -> Iterator[torch.Tensor]:
    """Endless batches of indices (int64, on ``device``) into ``n`` training examples, at most
    ``batch_size`` each, cut from a stream of random orders: a fresh ``torch.randperm(n)`` from
    ``generator`` is appended whenever fewer than ``min(batch_size, n)`` indices are left (the
    rest carried over). An order is drawn only when the batch that needs it is asked for, so
    other draws from ``generator`` between batches keep their place. Shared by STE and learned
    alignment."""
    order = torch.empty(0, dtype=torch.long)
    while True:
        if order.numel() < min(batch_size, n):
            order = torch.cat([order, torch.randperm(n, generator=generator)])
        idx, order = order[:batch_size].to(device), order[batch_size:]
        yield idx


def aliased_names(model: nn.Module) -> set[str]:
    """The second names of shared tensors in ``model``'s state dict (a tied head:
    ``head.weight`` is ``tok.weight``): left out of a state given to ``functional_call``,
    which ties them to the first name, gradient included."""
    owned = {name for name, _ in model.named_parameters()}
    owned |= {name for name, _ in model.named_buffers()}
    return {k for k in model.state_dict() if k not in owned}


def _has_batchnorm(model: nn.Module) -> bool:
    return any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.modules())


def ste_matching(
    spec: PermutationSpec,
    model_a: nn.Module,
    model_b: nn.Module,
    inputs: torch.Tensor,
    labels: torch.Tensor,
    *,
    steps: int = 200,
    lr: float = 1e-3,
    batch_size: int = 128,
    seed: int = 0,
    holdout: int | None = None,
    max_iter: int = 100,
    tol: float = 1e-4,
    quiet: bool = True,
    task: Task | str = "classification",
) -> SteMatchingResult:
    """Learn a permutation of B whose midpoint with A has low loss (see the module docstring).

    ``inputs``/``labels``: training examples and their int64 targets as ``task`` lays them out
    (default ``classification``: (N,) class labels; ``next-token``: (N, T) next tokens; the
    loss is the task's, :mod:`lmc.data.tasks`). The last ``holdout`` examples (whole windows
    for next-token; default ``min(1024, N // 5)``) judge the candidates; the rest are drawn in
    batches of ``batch_size`` in an order fixed by ``seed`` (which also seeds weight matching).
    ``steps`` Adam steps with learning rate ``lr``; ``max_iter`` and ``tol`` go to weight
    matching. Returns a :class:`SteMatchingResult`: ``result.perm`` is the best permutation
    for B, with the losses that chose it. ``model_a``'s training flags are restored.
    """
    if labels is None:
        raise LmcError("STE matching needs labels for its training loss")
    task = get_task(task)
    n = int(inputs.shape[0])
    if n != int(labels.shape[0]):
        raise LmcError(f"{n} inputs but {labels.shape[0]} labels")
    if steps < 0 or batch_size < 1 or lr <= 0:
        raise LmcError("STE needs steps >= 0, batch_size >= 1 and lr > 0")
    if n < 2:
        raise LmcError("STE matching needs at least two examples")
    device = module_device(model_a)
    (x_train, y_train), (x_hold, y_hold) = holdout_split(inputs, labels, holdout, device)
    holdout = len(x_hold)

    state_a = {k: v.detach() for k, v in model_a.state_dict().items()}
    state_b = {k: v.detach().to(device) for k, v in model_b.state_dict().items()}
    param_names = [name for name, _ in model_a.named_parameters()]
    floating = [k for k, v in state_a.items() if v.is_floating_point()]
    aliases = aliased_names(model_a)
    tilde = {k: state_a[k].clone().requires_grad_(True) for k in param_names}
    optimizer = torch.optim.Adam(list(tilde.values()), lr=lr)
    gen = torch.Generator().manual_seed(int(seed))
    train_mode = _has_batchnorm(model_a)

    def midpoint(perm: Perm, straight_through: bool) -> dict[str, torch.Tensor]:
        b = apply_permutation(spec, perm, state_b)
        mid = {}
        for k, v in state_a.items():
            if k in aliases:
                continue
            if k in tilde and straight_through:
                mid[k] = 0.5 * (v + (b[k] + tilde[k] - tilde[k].detach()))
            elif k in floating:
                mid[k] = 0.5 * (v + b[k])
            else:
                mid[k] = v.clone()
        return mid

    def holdout_loss(perm: Perm) -> float:
        with torch.no_grad():
            out = functional_call(model_a, midpoint(perm, False), (x_hold,))
            return float(task.loss(out, y_hold))

    def current_state() -> dict[str, torch.Tensor]:
        return {**state_a, **{k: v.detach() for k, v in tilde.items()}}

    train_losses: list[float] = []
    with preserved_modes(model_a):
        model_a.train(train_mode)
        # STE's weight matching keeps the start and solver its committed results ran with
        # (weight matching's own defaults are now the one-pass start and solver "auto")
        perm = weight_matching(
            spec, state_a, state_b, seed=seed, max_iter=max_iter, tol=tol, init="identity",
            solver="scipy",
        ).perm  # fmt: skip
        best_perm, best_loss, best_step = perm, holdout_loss(perm), 0
        initial_loss = best_loss
        seen = {_key(perm): best_loss}

        def project_and_score(step: int) -> None:
            """Project the current θ̃ onto B's permutations (warm-started weight matching);
            keep the permutation if its held-out midpoint loss is the best so far."""
            nonlocal perm, best_perm, best_loss, best_step
            perm = weight_matching(
                spec,
                current_state(),
                state_b,
                seed=seed,
                max_iter=max_iter,
                tol=tol,
                init_perm=perm,
                solver="scipy",
            ).perm
            key = _key(perm)
            if key not in seen:
                seen[key] = holdout_loss(perm)
                if seen[key] < best_loss:
                    best_perm, best_loss, best_step = perm, seen[key], step

        batches = training_batches(x_train.shape[0], batch_size, gen, device)
        for step in progress(range(1, steps + 1), quiet=quiet, desc="STE"):
            idx = next(batches)
            if step > 1:
                project_and_score(step)
            out = functional_call(model_a, midpoint(perm, True), (x_train[idx],))
            loss = task.loss(out, y_train[idx])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            train_losses.append(float(loss.detach()))
        # the permutation projected from the final θ̃ is a candidate too
        if steps > 0:
            project_and_score(steps + 1)
    return SteMatchingResult(
        perm=best_perm,
        initial_loss=initial_loss,
        best_loss=best_loss,
        best_step=best_step,
        train_losses=tuple(train_losses),
        candidates=len(seen),
        holdout=holdout,
        steps=steps,
        train_mode=train_mode,
    )


# ---------------------------------------------------------------------------------------------
# the method's record: ``ste``


def _align(job: AlignJob, **settings: Any) -> MethodOutput:
    ste = ste_matching(
        job.spec,
        job.model_a,
        job.model_b,
        job.inputs,
        job.labels,
        seed=job.seed,
        quiet=job.quiet,
        task=job.task,
        **settings,
    )
    extras = {}
    for f in fields(ste):
        if f.name != "perm":
            value = getattr(ste, f.name)
            extras[f"ste_{f.name}"] = list(value) if isinstance(value, tuple) else value
    return MethodOutput(ste.perm, extras)


METHOD = register_method(
    AlignmentMethod(
        "ste",
        _align,
        "straight-through estimator: learns the permutation whose midpoint with A has low "
        "training loss (the best one seen is kept, weight matching's included)",
        settings=(
            MethodSetting(
                "steps", 200, "Adam steps (0: the weight-matching start, untrained)", minimum=0
            ),
            MethodSetting("lr", 1e-3, "Adam learning rate", type=float, positive=True),
            MethodSetting("batch_size", 128, "training batch size", minimum=1),
            MethodSetting(
                "holdout",
                None,
                "training examples held out to pick the best permutation (none: "
                "min(1024, 20% of the examples))",
                minimum=1,
                optional=True,
            ),
            MethodSetting("max_iter", 100, "weight matching's most passes", minimum=1),
            MethodSetting(
                "tol", 1e-4, "weight matching's stopping fraction", type=float, minimum=0.0
            ),
        ),
        needs_labels=True,
        label="straight-through estimator",
        order=50,
        style=MethodStyle("#CC79A7", "D"),
    )
)
