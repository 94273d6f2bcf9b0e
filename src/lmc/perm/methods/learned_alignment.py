"""Learned alignment in orthogonal groups (issue 30; the learned transforms of Theus et al.,
NeurIPS 2025, with λ sampled along the path as Git Re-Basin's STE does).

Start from the closed form: orthogonal weight matching
(:mod:`lmc.perm.methods.orthogonal_weight_matching`) of the canonical pair gives T₀ and B₁ =
T₀(θ_B). Then learn one orthogonal map R_g per learnable group g, applied on top of B₁:

- the residual stream (dense, d × d);
- with ``heads``, every attention group's within-head dims (block-diagonal: one d_h × d_h block
  per head, the heads keeping their matched order). q/k and v/out admit any invertible map
  within a head: ``head_maps = "orthogonal"`` (default) learns the orthogonal subgroup,
  ``"invertible"`` the invertible maps. MLP units keep their matched permutation (an
  elementwise nonlinearity admits nothing else).
- with ``heads``, every *within group* of the spec (:mod:`lmc.perm.symmetries.within_heads`: dims
  within heads that the permutation spec keeps in place). Under rotary embeddings (kind ``rope``)
  the map is parametrised per head and frequency plane by an angle φ and, with ``head_maps =
  "invertible"``, a log-scale u: the plane's block is e^u R(φ) on q and e^{−u} R(φ) on k
  (:class:`lmc.perm.symmetries.transforms.RopePlanes`), so q·k and RoPE are kept exactly
  (interleaved RoPE, kind ``rope_interleaved``: the same on its planes of dims 2p and 2p + 1,
  :class:`lmc.perm.symmetries.transforms.InterleavedRopePlanes`);
  grouped-query attention's shared maps (kind ``invertible``) are learned as the nested groups' are,
  one block per key/value head, the same on each query head that reads it.

Each orthogonal R_g = exp(S_g − S_gᵀ) (the matrix exponential of a skew-symmetric matrix:
always orthogonal); each invertible one R_g = exp(S_g) (always invertible, with determinant
exp(tr S_g) > 0: the maps connected to the identity). S_g = 0 at the start (R = I: the closed
form). An axis holding the units' coordinates (role ``out``: q, v rows) is mapped by R, one that
pairs with them (role ``in``: k rows, the output projection's columns) by R⁻ᵀ = exp(−S_gᵀ), so
B's function is kept exactly (qᵀk = (R q)ᵀ(R⁻ᵀ k); :mod:`lmc.perm.symmetries.transforms`).

At every step λ is drawn
(``lambdas = "uniform"``: U(0, 1), a fresh draw per step; ``"midpoint"``: λ = ½), and the task's
loss (:mod:`lmc.data.tasks`) of θ(λ) = (1 − λ)θ_A + λ R(B₁) on a training batch takes an Adam
step on every S_g. With ``lambda_batch = k`` > 1 each step takes k values of λ, stratified
(λ_i = (i + u_i)/k, u_i ~ U(0, 1), i = 0 … k − 1; all ½ for ``"midpoint"``), splits the batch
into k slices of near-equal size, slice i evaluated at θ(λ_i), and steps on the mean of the k
losses weighted by slice size (one backward through one rotation of B₁): the same examples
per step, a lower-variance estimate of the loss averaged over the path. The learning rate is
``lr`` throughout (``schedule = "constant"``) or follows a half cosine from ``lr`` to 0 over
``steps`` (``"cosine"``). With ``precision = "bf16"`` the steps' forward passes run under
bfloat16 autocast (``"auto"``: where bfloat16 is native and measured faster,
:func:`lmc.config.precision.resolve_precision`; a result then depends on the machine); the
skew parameters, the maps, the held-out judgement and the result stay in float32/float64, so
B's function is kept exactly whatever the precision. Floating buffers are interpolated with
the same λ; the model runs in eval mode (transformers have no BatchNorm).

The map kept is the best seen by the midpoint's loss on a fixed held-out slice of the examples
(the last ``holdout`` of them, never used for the steps), judged at the start (the closed
form), every ``eval_every`` steps and at the end: the result is never worse than the closed form
on that criterion. With ``patience = p`` > 0 the steps stop early once p judgements in a row have
not improved on the best. The alignment returned is T₀ followed by R (one transform per group).

Cost (issue 42 item 5; ``benchmarks/learned_alignment.py --profile``): at GPT width 256 on a
CPU the steps' forward and backward passes take about 85 % of the earlier settings' time, the
held-out judgements about 10 %, the matrix exponentials, applying the maps to B₁ and the Adam
updates a few percent together. The defaults are the fast settings (100 steps of batch 16 on
a cosine schedule from 0.01, four λ per step, 2 judgements; ``benchmarks/learned_alignment.py``'s
``FAST``), which read a quarter of the examples of the earlier ones (200 steps of batch 64 at a
constant 0.01, one λ per step, 10 judgements: each setting's ``legacy``, which every result made
before them used and which recipes that reproduce those results pin). On three GPT pairs of
width 256 they left the barrier where the earlier settings did (no paired difference detected;
``docs/results/benchmarks/learned_alignment_barriers-2026-12-07.log``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.func import functional_call
from torch.profiler import record_function

from lmc.config import LmcError, progress
from lmc.config.precision import resolve_precision
from lmc.data.tasks import Task, get_task
from lmc.models import module_device, preserved_modes

from ..symmetries.alignment_map import Alignment
from ..symmetries.symmetry_spec import SymmetrySpec
from ..symmetries.transforms import (
    PLANE_CLASSES,
    Invertible,
    Orthogonal,
    Permutation,
    RopePlanes,
    act_blocks,
    plane_blocks,
)
from ..symmetries.within_heads import member_index, put_window, take_window
from .orthogonal_weight_matching import (
    default_orthogonal_groups,
    distances_from_permutation,
    orthogonal_weight_matching,
)
from .registry import AlignJob, AlignmentMethod, MethodOutput, MethodSetting, register_method
from .straight_through import aliased_names, holdout_split, training_batches

#: How λ is drawn at each step (module docstring).
LAMBDA_SAMPLING = ("uniform", "midpoint")
#: The maps learned within heads (module docstring).
HEAD_MAPS = ("orthogonal", "invertible")
#: The learning-rate schedules over the steps (module docstring).
SCHEDULES = ("constant", "cosine")
#: The precisions of the steps' forward passes (module docstring).
STEP_PRECISIONS = ("fp32", "bf16", "auto")


@dataclass(frozen=True, eq=False)
class LearnedAlignmentResult:
    """What :func:`learned_alignment` returns.

    ``alignment``: T₀ then R, to apply to B's canonical state; ``closed_form``: T₀;
    ``learned_groups``: the groups R acts on; ``initial_loss``: the held-out midpoint loss at
    the closed form; ``best_loss`` / ``best_step``: the kept map's (step 0: the closed form);
    ``train_losses``: the sampled path point's training loss at every step; ``holdout``:
    held-out examples; ``steps``: the steps asked for; ``steps_taken``: those taken (fewer when
    ``patience`` stopped early); ``distance_from_closed_form``: per learned group, ‖R − I‖_F /
    √(2n) of the kept R (0: the closed form unchanged); ``precision``: what the steps' forward
    passes ran in (``fp32`` or ``bf16``, ``auto`` resolved).
    """

    alignment: Alignment
    closed_form: Alignment
    learned_groups: tuple[str, ...]
    initial_loss: float
    best_loss: float
    best_step: int
    train_losses: tuple[float, ...]
    holdout: int
    steps: int
    distance_from_closed_form: dict[str, float]
    steps_taken: int = -1
    precision: str = "fp32"

    def __post_init__(self) -> None:
        if self.steps_taken < 0:
            object.__setattr__(self, "steps_taken", len(self.train_losses))


def learnable_groups(spec: SymmetrySpec, heads: bool = True) -> dict[str, int]:
    """Group -> number of blocks R has there: the stream groups (1 block) and, with ``heads``,
    the within-head groups (one block per head)."""
    out = {g: 1 for g in default_orthogonal_groups(spec)}
    if heads:
        for g, (_, count) in spec.spec.heads.items():
            if g in spec.kinds and spec.kinds[g] in ("orthogonal", "invertible"):
                out[g] = int(count)
        for g, w in spec.within.items():
            out[g] = int(w.heads)
    return out


def _shape(blocks: int, d: int, planes: bool) -> tuple[int, ...]:
    """The parameter's shape: (blocks, d, d), or (blocks, 2, d/2) for rotary planes."""
    return (blocks, 2, d // 2) if planes else (blocks, d, d)


def _rotations(
    skews: Mapping[str, torch.Tensor],
    invertible: frozenset[str] = frozenset(),
    planes: Mapping[str, type[RopePlanes]] | None = None,
) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """Per group, the (blocks, d, d) maps ``(R, R⁻ᵀ)``: the orthogonal exp(S − Sᵀ) (both the
    same), or for a group in ``invertible`` exp(S) and exp(−Sᵀ); for a group in ``planes``
    (rotary q/k) ``S`` is (blocks, 2, d/2): angles φ and log-scales u, R = e^u R(φ) per plane
    and R⁻ᵀ = e^{−u} R(φ) (:func:`lmc.perm.symmetries.transforms.plane_blocks`), in the plane
    layout of the group's class there (:class:`~lmc.perm.symmetries.transforms.RopePlanes`:
    dims p and p + d/2; ``InterleavedRopePlanes``: 2p and 2p + 1)."""
    planes = planes or {}
    out = {}
    for g, s in skews.items():
        if g in planes:
            angle, log_s = s[:, 0], s[:, 1]
            c, sn = torch.cos(angle), torch.sin(angle)
            scale = log_s.exp()
            layout = planes[g].layout()
            out[g] = (plane_blocks(scale * c, scale * sn, **layout),
                      plane_blocks(c / scale, sn / scale, **layout))  # fmt: skip
        elif g in invertible:
            out[g] = (torch.linalg.matrix_exp(s), torch.linalg.matrix_exp(-s.transpose(1, 2)))
        else:
            r = torch.linalg.matrix_exp(s - s.transpose(1, 2))
            out[g] = (r, r)
    return out


def _apply_rotations(
    spec: SymmetrySpec,
    state: Mapping[str, torch.Tensor],
    rotations: Mapping[str, tuple[torch.Tensor, torch.Tensor]],
) -> dict[str, torch.Tensor]:
    """``state`` with each group's blocks applied to every axis segment it indexes, by the
    segment's role: ``R`` on ``out`` axes, ``R⁻ᵀ`` on ``in`` axes (differentiable; for an
    orthogonal map the two are the same)."""
    pspec = spec.spec
    out = dict(state)
    inside = {}
    for key, members in member_index(spec.within).items():
        mine = tuple((g, m) for g, m in members if g in rotations)
        if mine:
            inside[key] = mine
    for name in pspec.permuted_names:
        if name not in state:
            continue
        x = state[name]
        for axis, entry in enumerate(pspec[name]):
            if entry is None or not any(
                seg.perm in rotations or (name, axis, k) in inside for k, seg in enumerate(entry)
            ):
                continue
            pieces, offset = [], 0
            for k, seg in enumerate(entry):
                piece = x.narrow(axis, offset, seg.extent)
                if (name, axis, k) in inside:  # a within group: R on each query head's copy
                    original = piece
                    for g, member in inside[(name, axis, k)]:
                        forward, inverse_t = rotations[g]
                        blocks = (inverse_t if member.role == "in" else forward).to(piece.dtype)
                        heads, length = spec.within[g].heads, member.tiles * spec.within[g].dim
                        window = take_window(original, axis, heads, member, length)
                        moved = _act_tiles(window, blocks, axis, member.tiles)
                        piece = put_window(piece, axis, heads, member, moved)
                elif seg.perm in rotations:
                    forward, inverse_t = rotations[seg.perm]
                    role = spec.role(name, axis, k)
                    if role == "norm":
                        raise LmcError(
                            f"{name!r} is an elementwise parameter of {seg.perm!r}: only a "
                            "permutation may act on it (canonicalise the transformer first)"
                        )
                    blocks = (inverse_t if role == "in" else forward).to(piece.dtype)
                    piece = act_blocks(piece, blocks, axis, seg.repeat)
                pieces.append(piece)
                offset += seg.extent
            x = torch.cat(pieces, dim=axis)
        out[name] = x
    return out


def _act_tiles(x: torch.Tensor, blocks: torch.Tensor, axis: int, tiles: int) -> torch.Tensor:
    """``blocks`` (heads, d, d) applied to an axis of heads × tiles × d (differentiable)."""
    h, d = blocks.shape[0], blocks.shape[1]
    moved = x.movedim(axis, -1)
    lead = moved.shape[:-1]
    y = torch.einsum("hij,...htj->...hti", blocks, moved.reshape(*lead, h, tiles, d))
    return y.reshape(*lead, h * tiles * d).movedim(-1, axis)


def learned_alignment(
    spec: SymmetrySpec,
    model_a: nn.Module,
    model_b: nn.Module,
    inputs: torch.Tensor,
    labels: torch.Tensor,
    *,
    steps: int = 100,
    lr: float = 1e-2,
    batch_size: int = 16,
    lambdas: str = "uniform",
    lambda_batch: int = 4,
    schedule: str = "cosine",
    heads: bool = True,
    head_maps: str = "orthogonal",
    holdout: int | None = None,
    evals: int = 2,
    eval_every: int | None = None,
    patience: int = 0,
    precision: str = "fp32",
    max_iter: int = 20,
    seed: int = 0,
    quiet: bool = True,
    task: Task | str = "next-token",
) -> LearnedAlignmentResult:
    """Learn orthogonal maps that lower the path's loss, from the closed form (module doc).

    ``spec``: the :class:`SymmetrySpec` of the canonical ``model_a`` (both models canonical,
    :mod:`lmc.perm.symmetries.canonical_form`); ``inputs`` / ``labels``: training examples and
    targets in ``task``'s layout; the last ``holdout`` (default ``min(1024, N // 5)``) judge the
    kept map, the rest are drawn in batches of ``batch_size`` in an order fixed by ``seed``
    (which also seeds the λ draws and the closed form's visiting order). ``steps`` Adam steps at
    ``lr`` on the skew parameters, ``schedule`` ``constant`` or ``cosine``; ``lambda_batch``
    values of λ per step (the batch split among them in near-equal slices, each slice's loss
    weighted by its size; at most ``batch_size`` of them: more are cut to it); ``eval_every``:
    steps between held-out judgements (``None``: ``max(1, steps // evals)``); ``patience``: stop
    after that many held-out judgements in a row without improvement (0: never); ``precision``:
    the steps' forward passes in ``fp32``, ``bf16`` or ``auto``; ``max_iter``: the closed form's
    rounds; ``head_maps``: ``orthogonal`` or ``invertible`` maps within heads (with ``heads``).
    ``model_a``'s training flags are restored. The defaults are the method record's (the fast
    settings, module doc); ``steps=200, batch_size=64, lambda_batch=1, schedule="constant",
    evals=10`` are the earlier behaviour, exactly.
    """
    if not isinstance(spec, SymmetrySpec):
        raise LmcError("learned alignment needs a SymmetrySpec of the canonical model")
    if labels is None:
        raise LmcError("learned alignment needs labels: it minimises the path's loss")
    if head_maps not in HEAD_MAPS:
        raise LmcError(f"head_maps must be one of {', '.join(HEAD_MAPS)}, got {head_maps!r}")
    if lambdas not in LAMBDA_SAMPLING:
        raise LmcError(f"lambdas must be one of {', '.join(LAMBDA_SAMPLING)}, got {lambdas!r}")
    if steps < 0 or batch_size < 1 or lr <= 0:
        raise LmcError("learned alignment needs steps >= 0, batch_size >= 1 and lr > 0")
    if schedule not in SCHEDULES:
        raise LmcError(f"schedule must be one of {', '.join(SCHEDULES)}, got {schedule!r}")
    if precision not in STEP_PRECISIONS:
        raise LmcError(f"precision must be one of {', '.join(STEP_PRECISIONS)}, got {precision!r}")
    if lambda_batch < 1:
        raise LmcError(f"lambda_batch must be at least 1, got {lambda_batch}")
    lambda_batch = min(lambda_batch, batch_size)  # each value of lambda takes a slice
    if patience < 0:
        raise LmcError(f"patience must be at least 0 (0: never stop early), got {patience}")
    task = get_task(task)
    n = int(inputs.shape[0])
    if n < 2 or n != int(labels.shape[0]):
        raise LmcError(f"learned alignment needs at least 2 examples with labels, got {n}")
    if evals < 1:
        raise LmcError(f"evals must be at least 1, got {evals}")
    eval_every = max(1, steps // evals) if eval_every is None else max(1, int(eval_every))
    device = module_device(model_a)
    (x_train, y_train), (x_hold, y_hold) = holdout_split(inputs, labels, holdout, device)
    precision = _step_precision(precision, device)
    holdout = len(x_hold)

    state_a = {k: v.detach() for k, v in model_a.state_dict().items()}
    state_b = {k: v.detach().to(device) for k, v in model_b.state_dict().items()}
    with record_function("learned.closed_form"):
        closed = orthogonal_weight_matching(spec, state_a, state_b, seed=seed, max_iter=max_iter)
        b1 = closed.alignment.apply(spec, state_b)
    aliases = aliased_names(model_a)  # tied second names (functional_call)
    floating = {k for k, v in state_a.items() if v.is_floating_point()}

    sizes = spec.group_sizes
    groups = learnable_groups(spec, heads)
    invertible = frozenset(
        g
        for g in groups
        if head_maps == "invertible"
        and (g in spec.heads or g in spec.within)
        and spec.kinds[g] in ("invertible", *PLANE_CLASSES)
    )
    #: the rotary q/k groups and the class of their plane layout
    planes = {
        g: PLANE_CLASSES[spec.within[g].kind]
        for g in groups
        if g in spec.within and spec.within[g].kind in PLANE_CLASSES
    }
    if head_maps == "invertible" and not invertible:
        raise LmcError(
            "head_maps='invertible' learns maps within heads, but there are none to learn: it "
            "needs heads=True and attention with more than one head"
        )
    sizes = {**sizes, **{g: w.size for g, w in spec.within.items()}}
    skews = {
        g: torch.zeros(*_shape(h, sizes[g] // h, g in planes), device=device, requires_grad=True)
        for g, h in groups.items()
    }
    params = list(skews.values())
    fixed_scale = {g for g in planes if g not in invertible}  # rotations only: u stays 0
    optimizer = torch.optim.Adam(params, lr=lr)
    scheduler = (
        torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=max(1, steps))
        if schedule == "cosine"
        else None
    )
    gen = torch.Generator().manual_seed(int(seed))
    autocast = _autocast(precision, device)

    def point(lam: float | torch.Tensor, rotations) -> dict[str, torch.Tensor]:
        b = _apply_rotations(spec, b1, rotations)
        return {
            k: (1 - lam) * v + lam * b[k] if k in floating else v
            for k, v in state_a.items()
            if k not in aliases
        }

    def holdout_loss(rotations) -> float:
        with torch.no_grad(), record_function("learned.holdout"):
            return float(task.loss(functional_call(model_a, point(0.5, rotations), (x_hold,)),
                                   y_hold))  # fmt: skip

    def snapshot() -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
        return _rotations(
            {g: s.detach().double().cpu() for g, s in skews.items()}, invertible, planes
        )

    def draw() -> list[float]:
        if lambdas == "midpoint":
            return [0.5] * lambda_batch
        if lambda_batch == 1:  # the earlier draw, kept exactly
            return [float(torch.rand((), generator=gen))]
        u = torch.rand(lambda_batch, generator=gen, dtype=torch.float64)
        return [(i + float(u[i])) / lambda_batch for i in range(lambda_batch)]

    def path_loss(lams: list[float], rotations, idx: torch.Tensor) -> torch.Tensor:
        """The mean over ``lams`` of the loss at θ(λ_i) on slice i of the batch ``idx``."""
        with record_function("learned.apply_maps"):
            b = _apply_rotations(spec, b1, rotations)  # once per step, shared by every λ
        lams = lams[: len(idx)]  # fewer training examples than λ values: one λ per example
        slices = idx.tensor_split(len(lams)) if len(lams) > 1 else (idx,)
        total = 0.0
        for lam, part in zip(lams, slices, strict=True):
            state = {
                k: (1 - lam) * v + lam * b[k] if k in floating else v
                for k, v in state_a.items()
                if k not in aliases
            }
            with autocast, record_function("learned.forward"):
                out = functional_call(model_a, state, (x_train[part],))
                part_loss = task.loss(out.float(), y_train[part])
            total = total + part_loss * (len(part) / len(idx))
        return total

    train_losses: list[float] = []
    with preserved_modes(model_a):
        model_a.eval()
        best = snapshot()
        best_loss = initial_loss = holdout_loss(best)
        best_step = 0
        stale = 0  # judgements in a row without improvement (patience)
        batches = training_batches(x_train.shape[0], batch_size, gen, device)
        for step in progress(range(1, steps + 1), quiet=quiet, desc="learned alignment"):
            idx = next(batches)
            lams = draw()
            with record_function("learned.maps"):
                rotations = _rotations(skews, invertible, planes)
            loss = path_loss(lams, rotations, idx)
            optimizer.zero_grad(set_to_none=True)
            with record_function("learned.backward"):
                loss.backward()
            with record_function("learned.adam"):
                for g in fixed_scale:
                    skews[g].grad[:, 1] = 0
                optimizer.step()
                if scheduler is not None:
                    scheduler.step()
            train_losses.append(float(loss.detach()))
            if step % eval_every == 0 or step == steps:
                current = snapshot()
                value = holdout_loss(current)
                if value < best_loss:
                    best, best_loss, best_step = current, value, step
                    stale = 0
                else:
                    stale += 1
                    if patience and stale >= patience:
                        break

    def transform(g: str, size: int):
        if g not in best:
            return Permutation.identity(size)
        cls = planes.get(g) or (Invertible if g in invertible else Orthogonal)
        return cls(torch.arange(best[g][0].shape[0]), best[g][0])

    learned = Alignment(
        {g: transform(g, n) for g, n in sizes.items() if g not in spec.within or g in best}
    ).complete(spec)
    distance = {
        g: float(
            torch.linalg.matrix_norm(r - torch.eye(r.shape[1], dtype=r.dtype))
            .pow(2)
            .sum()
            .div(2 * sizes[g])
            .sqrt()
        )  # fmt: skip
        for g, (r, _) in best.items()
    }
    return LearnedAlignmentResult(
        alignment=closed.alignment.complete(spec).then(learned),
        closed_form=closed.alignment,
        learned_groups=tuple(groups),
        initial_loss=initial_loss,
        best_loss=best_loss,
        best_step=best_step,
        train_losses=tuple(train_losses),
        holdout=holdout,
        steps=steps,
        distance_from_closed_form=distance,
        steps_taken=len(train_losses),
        precision=precision,
    )


def _step_precision(precision: str, device: torch.device) -> str:
    """``fp32`` or ``bf16``: what the steps' forward passes run in (``auto`` resolved for
    ``device``; ``bf16`` where bfloat16 is emulated warns once, as a training run does)."""
    if device.type not in ("cpu", "cuda"):
        if precision == "bf16":
            raise LmcError(f"precision 'bf16' needs a CPU or CUDA device, not {device.type!r}")
        return "fp32"
    return resolve_precision(precision, device)


def _autocast(precision: str, device: torch.device):
    """The context of the steps' forward passes: bfloat16 autocast, or none for fp32."""
    if precision == "bf16":
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


# ---------------------------------------------------------------------------------------------
# the method's record: ``learned``


def _align(job: AlignJob, **settings: Any) -> MethodOutput:
    result = learned_alignment(
        job.symmetry, job.model_a, job.model_b, job.inputs, job.labels, seed=job.seed,
        quiet=job.quiet, task=job.task, **settings,
    )  # fmt: skip
    extras = {
        "learned_groups": list(result.learned_groups),
        "learned_initial_loss": result.initial_loss,
        "learned_best_loss": result.best_loss,
        "learned_best_step": result.best_step,
        "learned_train_losses": list(result.train_losses),
        "learned_holdout": result.holdout,
        "learned_steps_taken": result.steps_taken,
        "learned_precision": result.precision,
        "distance_from_closed_form": result.distance_from_closed_form,
        "distance_from_permutation": distances_from_permutation(
            result.alignment,
            [
                g
                for g in result.learned_groups
                if result.alignment[g].kind == "orthogonal" and result.alignment[g].heads == 1
            ],
        ),
    }
    return MethodOutput(result.alignment, extras)


METHOD = register_method(
    AlignmentMethod(
        "learned",
        _align,
        "learned orthogonal alignment of pre-LN transformers: from the orthogonal closed "
        "form, stream and within-head rotations trained on the path's loss at sampled "
        "lambdas (the best on held-out examples kept)",
        settings=(
            MethodSetting("steps", 100, "Adam steps (0: the closed form)", minimum=0, legacy=200),
            MethodSetting(
                "lr",
                1e-2,
                "Adam learning rate (with schedule cosine: its start)",
                type=float,
                positive=True,
            ),
            MethodSetting(
                "schedule",
                "cosine",
                "the learning rate over the steps: constant, or a half cosine from lr to 0",
                type=str,
                choices=("constant", "cosine"),
                legacy="constant",
            ),
            MethodSetting("batch_size", 16, "training batch size", minimum=1, legacy=64),
            MethodSetting(
                "lambda_batch",
                4,
                "values of lambda per step, stratified over the path, each on its slice "
                "of the batch (1: one lambda per step)",
                minimum=1,
                legacy=1,
            ),
            MethodSetting(
                "lambdas",
                "uniform",
                "where on the path each step's loss is taken: uniform (a fresh lambda in "
                "[0, 1] per step) or midpoint (1/2)",
                type=str,
                choices=("uniform", "midpoint"),
            ),
            MethodSetting(
                "heads", True, "also learn maps within each head (see head_maps)", type=bool
            ),
            MethodSetting(
                "head_maps",
                "orthogonal",
                "the maps learned within heads: orthogonal, or invertible (q/k and v/out "
                "admit any invertible map)",
                type=str,
                choices=("orthogonal", "invertible"),
            ),
            MethodSetting(
                "holdout",
                None,
                "training examples held out to pick the best map (none: min(1024, 20% of "
                "the examples))",
                minimum=1,
                optional=True,
            ),
            MethodSetting(
                "evals",
                2,
                "judgements of the map on the held-out examples after the closed form's: "
                "every steps // evals steps and at the end",
                minimum=1,
                legacy=10,
            ),
            MethodSetting(
                "patience",
                0,
                "stop after this many held-out judgements in a row without improvement "
                "(0: take every step)",
                minimum=0,
                legacy=0,
            ),
            MethodSetting(
                "precision",
                "fp32",
                "the steps' forward passes: fp32, bf16 (bfloat16 autocast) or auto (bf16 "
                "where native and faster); the maps and their judgement stay float32",
                type=str,
                choices=("fp32", "bf16", "auto"),
                legacy="fp32",
            ),
            MethodSetting("max_iter", 20, "the closed form's most rounds", minimum=1),
        ),
        needs_labels=True,
        canonical=True,
        order=80,
        summary="from `orthogonal`, stream and within-head rotations trained on the path's loss",
    )
)


__all__ = [
    "HEAD_MAPS",
    "LAMBDA_SAMPLING",
    "LearnedAlignmentResult",
    "SCHEDULES",
    "STEP_PRECISIONS",
    "learnable_groups",
    "learned_alignment",
]
