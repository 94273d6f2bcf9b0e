"""Training a curve's control point (Garipov et al. 2018) for any model, and storing it.

:func:`fit_curve` trains θ_C of a Bézier curve or a chain (:mod:`lmc.merge.curves`) between
two state dicts of one ``nn.Module`` to minimise the expected loss along the curve,
E_{t∼U(0,1)} L(θ(t)), on training examples: each step draws one t uniformly and one batch,
evaluates the model at θ(t) through ``torch.func.functional_call`` on parameter dictionaries
(no curve version of any layer: zoo models, Hugging Face models and a user's own module alike)
and takes a gradient step on θ_C, the only trained tensors (gradient w_C(t) · ∂L/∂θ). The
loss is the task's (:meth:`lmc.data.tasks.Task.loss`: classification or next-token).

- θ_C starts at the midpoint (θ_A + θ_B)/2. Trained: the model's parameters that require a
  gradient (a tied tensor, e.g. a GPT's shared embedding and head, or a submodule registered
  under two names, is one tensor, trained once under its first name and copied to the others).
  **Frozen parameters** (``requires_grad=False`` on ``model_a``) are part of θ and lie on the
  curve, but are not trained: their control entry stays at the midpoint, so on them every
  curve is the line (and constant where A and B share them, e.g. a frozen pretrained
  backbone). Floating buffers lie on the curve with their control entry kept at the
  midpoint; integer buffers, and non-persistent buffers (not in the state dict), are the
  model's own, A's, while the curve is fitted (:mod:`lmc.merge.curves`).
- Half precision: the trained entries of θ_C whose endpoints are float16 or bfloat16 are kept
  and trained in float32 (a master copy, started at the float32 midpoint), so that steps
  below the half-precision spacing are not lost; the point θ(t) the model runs on is in the
  endpoints' dtype, and the fitted control point is rounded to it at the end. Sparse
  gradients (``nn.Embedding(sparse=True)``) are made dense for the optimizer.
- The model runs in training mode, as when it was trained: a BatchNorm layer normalises with
  the batch's own statistics (its running statistics are neither used nor kept; they are
  recomputed at every evaluated point afterwards, :func:`lmc.metrics.curve_path.evaluate_curve`),
  and dropout is active.
- Seeds: the data order, the t draws and any dropout of epoch e are functions of ``seed`` and
  e only (:func:`lmc.train.loop.epoch_generator`; the global RNG is seeded for the epoch and
  restored afterwards), so the same seed gives the same control point, and a run resumed from
  a checkpoint ends bit-identical (on CPU) to an uninterrupted one.
- The model's ``forward(x)`` must return the logits as one tensor: a tuple, dict or Hugging
  Face ``ModelOutput`` is refused before training (:func:`lmc.merge.curves.check_model_output`),
  as are state-dict entries that are not tensors.
- Checkpoints (``checkpoint_dir``): after every epoch, θ_C's trained tensors and the
  optimizer's state in one safetensors file whose metadata (JSON) holds the epoch, the
  history and a fingerprint of the endpoints, the data and the settings; written atomically.
  A later call with the same folder resumes from it (a finished run returns at once).
- The control point is stored as a run of its own (:func:`save_curve`): ``config.json``
  (:func:`curve_config`: the kind, the settings and the two endpoints), ``model.safetensors``
  (θ_C as a whole state dict: a model of the architecture), ``metrics.json`` and the
  manifest, written as one unit; :func:`load_curve` reads it back as a :class:`Curve`.
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import os
import time
import warnings
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open
from torch import nn
from torch.func import functional_call

from lmc.config import (
    LmcError,
    LmcWarning,
    canonical_json,
    check_choice,
    check_int,
    check_number,
    check_regular_file,
    config_hash,
    environment_info,
)
from lmc.config.progress import complete, progress_bar
from lmc.data import batches
from lmc.data.tasks import Task, get_task
from lmc.models import module_device
from lmc.store import (
    CONFIG_FILE,
    MANIFEST_FILE,
    METRICS_FILE,
    MODEL_FILE,
    Run,
    RunStore,
    load_run,
    load_tensors,
    output_dir,
    save_tensors,
    write_json,
)
from lmc.store.manifest import write_manifest
from lmc.train.checkpoint import flatten_optimizer, unflatten_optimizer
from lmc.train.loop import epoch_generator
from lmc.train.schedule import learning_rate
from lmc.train.settings import TrainSettings

from .curves import (
    Curve,
    PathKind,
    StateDict,
    check_model_output,
    check_tensor_entries,
    combine,
    combine_into,
    get_path_kind,
    state_digest,
)

#: Optimizers of the control point: SGD (heavy-ball momentum) or Adam, both with coupled L2
#: weight decay on θ_C.
CURVE_OPTIMIZERS = ("sgd", "adam")
#: Learning-rate schedules (:func:`lmc.train.schedule.learning_rate`).
CURVE_SCHEDULES = ("constant", "cosine")
#: The checkpoint file in ``checkpoint_dir``.
CURVE_CHECKPOINT = "curve_checkpoint.safetensors"

_ORDER_SALT, _T_SALT, _DROPOUT_SALT = 0xC0, 0xC1, 0xC2
_META_KEY, _DIGEST_KEY = "lmc_curve_checkpoint", "lmc_sha256"


@dataclass(frozen=True)
class CurveSettings:
    """How a curve's control point is trained (validated; ``LmcError`` names the setting).

    Attributes:
        kind: ``bezier`` or ``chain`` (:data:`lmc.merge.curves.PATH_KINDS`; the line has
            nothing to train).
        epochs: passes over the training examples (a checkpoint after each).
        steps_per_epoch: steps per epoch, or ``None`` for a whole pass, ``n // batch_size``
            (the last partial batch dropped; a ``batch_size`` above ``n`` is one full batch).
        batch_size: examples per step.
        optimizer: ``adam`` or ``sgd`` (:data:`CURVE_OPTIMIZERS`).
        lr: peak learning rate; ``momentum``: SGD's momentum (Adam's beta1);
            ``weight_decay``: coupled L2 on θ_C.
        schedule: ``constant`` or ``cosine`` (to 0 over all steps).
        seed: seeds the data order, the t draws and dropout.
    """

    kind: str = "bezier"
    epochs: int = 10
    steps_per_epoch: int | None = None
    batch_size: int = 128
    optimizer: str = "adam"
    lr: float = 1e-3
    momentum: float = 0.9
    weight_decay: float = 0.0
    schedule: str = "constant"
    seed: int = 0

    def __post_init__(self) -> None:
        kind = get_path_kind(self.kind)
        if kind.control_points == 0:
            raise LmcError(
                f"a {kind.name} has no control point to train: use kind 'bezier' or 'chain'"
            )
        values = {
            "kind": kind.name,
            "epochs": check_int("epochs", self.epochs, minimum=1),
            "steps_per_epoch": check_int(
                "steps_per_epoch", self.steps_per_epoch, minimum=1, optional=True
            ),
            "batch_size": check_int("batch_size", self.batch_size, minimum=1),
            "optimizer": check_choice("optimizer", self.optimizer, CURVE_OPTIMIZERS, "optimizer"),
            "lr": check_number("lr", self.lr, positive=True),
            "momentum": check_number("momentum", self.momentum, minimum=0.0),
            "weight_decay": check_number("weight_decay", self.weight_decay, minimum=0.0),
            "schedule": check_choice("schedule", self.schedule, CURVE_SCHEDULES, "schedule"),
            "seed": check_int("seed", self.seed, minimum=0),
        }
        if values["momentum"] >= 1:
            raise LmcError(f"momentum must be below 1, got {values['momentum']:g}")
        for name, value in values.items():
            object.__setattr__(self, name, value)

    @property
    def path_kind(self) -> PathKind:
        return get_path_kind(self.kind)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CurveSettings:
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise LmcError(
                f"unknown curve setting {unknown[0]!r}: known are {', '.join(sorted(names))}"
            )
        return cls(**data)

    @classmethod
    def option_names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))


@dataclass
class CurveFit:
    """A trained curve: ``curve`` (its control point a whole state dict), the ``settings``,
    the per-epoch ``history`` (``epoch`` 1-based, ``train_loss``: the mean task loss of the
    epoch's steps, each at its own t, in nats; ``lr`` at the epoch's end; ``seconds``),
    ``epochs_done``, ``steps_per_epoch``, ``resumed_from_epoch`` (``None`` when not resumed)
    and ``seconds`` (this call's wall time)."""

    curve: Curve
    settings: CurveSettings
    history: list[dict[str, Any]] = field(default_factory=list)
    epochs_done: int = 0
    steps_per_epoch: int = 0
    resumed_from_epoch: int | None = None
    seconds: float = 0.0

    def metrics(self, device: str | torch.device | None = None, **extra: Any) -> dict[str, Any]:
        """The ``metrics.json`` of the stored control point: history, epochs, steps per epoch,
        the epoch it resumed from, the wall time, the bend's distance from the line's midpoint
        (:meth:`Curve.bend_distance`, float entries) and the environment; ``extra`` added."""
        return {
            "history": self.history,
            "epochs_done": self.epochs_done,
            "steps_per_epoch": self.steps_per_epoch,
            "resumed_from_epoch": self.resumed_from_epoch,
            "wall_seconds": self.seconds,
            "bend_distance": self.curve.bend_distance(),
            "environment": environment_info(device),
            **extra,
        }


def _owners(model: nn.Module) -> dict[str, str]:
    """Each state-dict key -> the name ``functional_call`` knows its tensor by: itself, or for
    a tied tensor (a GPT's ``head.weight`` that is ``tok.weight``) its first name."""
    first: dict[int, str] = {}
    for name, t in model.named_parameters():
        first.setdefault(id(t), name)
    for name, t in model.named_buffers():
        first.setdefault(id(t), name)
    return {k: first.get(id(v), k) for k, v in model.state_dict(keep_vars=True).items()}


def _settings(settings: CurveSettings | None, options: dict[str, Any]) -> CurveSettings:
    unknown = sorted(set(options) - set(CurveSettings.option_names()))
    if unknown:
        raise TypeError(
            f"fit_curve() got an unexpected keyword argument {unknown[0]!r}; its options are "
            f"those of CurveSettings: {', '.join(CurveSettings.option_names())}"
        )
    if settings is None:
        return CurveSettings(**options)
    if not isinstance(settings, CurveSettings):
        raise LmcError(f"settings must be a CurveSettings, got {type(settings).__name__}")
    return CurveSettings(**{**settings.to_dict(), **options}) if options else settings


def _fingerprint(
    settings: CurveSettings,
    state_a: StateDict,
    state_b: StateDict,
    x: torch.Tensor,
    y: torch.Tensor,
    task: Task,
    names: list[str],
) -> str:
    """What a checkpoint belongs to: the settings, both endpoints, the data, the task and the
    trained names (a SHA-256 over their canonical description)."""
    data = {"x": state_digest({"x": x}), "y": state_digest({"y": y})}
    record = {
        "settings": settings.to_dict(),
        "a": state_digest(state_a),
        "b": state_digest(state_b),
        "data": data,
        "task": task.name,
        "names": names,
    }
    if any(state_a[n].dtype in (torch.float16, torch.bfloat16) for n in names if n in state_a):
        # half-precision entries train in a float32 master copy: a checkpoint written before
        # (its control point and optimizer state in half precision) belongs to another fit
        record["master"] = "float32"
    return hashlib.sha256(canonical_json(record).encode()).hexdigest()


def fit_curve(
    model_a: nn.Module,
    model_b: nn.Module | None,
    x: torch.Tensor,
    y: torch.Tensor,
    settings: CurveSettings | None = None,
    *,
    state_b: Mapping[str, torch.Tensor] | None = None,
    task: Task | str = "classification",
    device: str | torch.device | None = None,
    quiet: bool = True,
    checkpoint_dir: str | os.PathLike | None = None,
    stop_epoch: int | None = None,
    **options: Any,
) -> CurveFit:
    """Train the control point of a curve from ``model_a`` (t = 0) to ``model_b`` (t = 1).

    Args:
        model_a: model A; its architecture is used through ``functional_call`` on a copy
            (neither model is changed).
        model_b: model B, or ``None`` when ``state_b`` is given (e.g. B aligned to A, which
            overrides ``model_b``'s weights).
        x, y: the training examples ``(N, ...)`` and their targets as ``task`` lays them out,
            on any device (batches are moved to ``device``).
        settings: a :class:`CurveSettings` (default: the defaults); ``**options``: any of its
            fields, applied on top.
        task: a :class:`lmc.data.tasks.Task` or its name: its loss is minimised.
        device: where to train (default: ``model_a``'s device).
        quiet: no progress bar.
        checkpoint_dir: a folder for :data:`CURVE_CHECKPOINT` (written after each epoch,
            resumed from when it is there and belongs to this curve; ``LmcError`` when it
            belongs to another one).
        stop_epoch: stop after this many epochs (of ``settings.epochs``): an interrupted
            run, resumed by a later call.

    Memory: besides the two models, θ_A, θ_B, θ_C, the point θ(t) with its gradient and the
    optimizer's state (one tensor per trained tensor for SGD, two for Adam) on ``device``.

    Returns a :class:`CurveFit`. ``LmcError`` when the loss becomes NaN or infinite.
    """
    s = _settings(settings, options)
    task = get_task(task)
    kind = s.path_kind
    if model_b is None and state_b is None:
        raise LmcError("fit_curve needs model_b or state_b")
    if len(x) != len(y):
        raise LmcError(f"{len(x)} inputs but {len(y)} targets: give one target per example")
    if len(x) == 0:
        raise LmcError("the training split is empty: nothing to fit the curve on")
    task.check(None, y, name="y")
    stop = s.epochs if stop_epoch is None else check_int("stop_epoch", stop_epoch, minimum=0)
    stop = min(stop, s.epochs)
    device = torch.device(device) if device is not None else module_device(model_a)

    source_a = model_a.state_dict()
    source_b = state_b if state_b is not None else model_b.state_dict()
    check_tensor_entries(source_a, "A")
    check_tensor_entries(source_b, "B")
    work = copy.deepcopy(model_a).to(device)
    owners = _owners(work)
    check_model_output(work, x, y, task, device=device, source="model A")
    state_a = {k: v.detach().to(device) for k, v in source_a.items()}
    state_b = {k: v.detach() for k, v in source_b.items()}
    curve0 = Curve(kind, state_a, state_b)  # checks names and shapes; θ_C at the midpoint
    state_b, midpoint = curve0.state_b, curve0.control
    assert midpoint is not None
    params = dict(work.named_parameters())
    param_names = [k for k in state_a if owners[k] == k and k in params]
    buffer_names = [
        k for k in state_a if owners[k] == k and k not in params and state_a[k].is_floating_point()
    ]
    trained = [k for k in param_names if params[k].requires_grad]
    if not trained:
        raise LmcError("the model has no parameter that requires a gradient: nothing to train")
    control = {k: _control_start(k, state_a, state_b, midpoint, k in trained)
               for k in param_names + buffer_names}  # fmt: skip
    optimizer = _optimizer(s, [control[k] for k in trained], device)
    point = _Point(state_a, state_b, control, param_names + buffer_names, trained)

    n = len(x)
    batch_size = min(s.batch_size, n)
    full = n // batch_size
    steps = full if s.steps_per_epoch is None else s.steps_per_epoch
    if steps > full:
        raise LmcError(
            f"steps_per_epoch={steps} needs {steps * batch_size} examples per epoch but there "
            f"are {n} (at most {full} steps of {batch_size})"
        )
    schedule = TrainSettings(epochs=s.epochs, lr=s.lr, schedule=s.schedule, batch_size=batch_size)

    start, history, resumed = 0, [], None
    path = fingerprint = None
    if checkpoint_dir is not None:
        path = Path(checkpoint_dir) / CURVE_CHECKPOINT
        fingerprint = _fingerprint(s, state_a, state_b, x, y, task, trained)
        found = _load_checkpoint(path, fingerprint, trained)
        if found is not None:
            start, history = found["epoch"], found["history"]
            resumed = start
            with torch.no_grad():
                for k in trained:
                    control[k].copy_(found["control"][k])
            optimizer.load_state_dict(found["optimizer"])

    started = time.perf_counter()
    total = max(0, stop - start) * steps
    bar = progress_bar(total, quiet=quiet, desc=f"curve ({kind.name})", unit="step")
    was_training = work.training
    work.train()
    try:
        for epoch in range(start, stop):
            epoch_start = time.perf_counter()
            order = epoch_generator(s.seed, epoch, _ORDER_SALT)
            t_gen = epoch_generator(s.seed, epoch, _T_SALT)
            loss_sum = torch.zeros((), dtype=torch.float64, device=device)
            seen = 0
            lr = s.lr
            with _seeded_rng(device, s.seed, epoch):
                index = batches(n, batch_size, generator=order, shuffle=True, drop_last=True)
                for step_in_epoch, idx in enumerate(index):
                    if step_in_epoch == steps:
                        break
                    lr = learning_rate(schedule, epoch * steps + step_in_epoch, steps)
                    for group in optimizer.param_groups:
                        group["lr"] = lr
                    t = float(torch.rand((), generator=t_gen, dtype=torch.float64))
                    idx = idx.to(x.device)
                    xb = x[idx].to(device, non_blocking=True)
                    yb = y[idx].to(device, non_blocking=True)
                    w = kind.weights(t)
                    out = functional_call(work, point.load(w), (xb,))
                    loss = task.loss(out.float(), yb)
                    loss.backward()
                    point.to_control(w[1])
                    optimizer.step()
                    loss_sum += loss.detach().double() * yb.numel()
                    seen += yb.numel()
                    bar.update(1)
            train_loss = loss_sum.item() / max(1, seen)
            if not math.isfinite(train_loss):
                raise LmcError(
                    f"the loss along the curve became {train_loss} in epoch {epoch + 1}: lower "
                    "the learning rate (lr)"
                )
            history.append(
                {"epoch": epoch + 1, "train_loss": train_loss, "lr": lr,
                 "seconds": time.perf_counter() - epoch_start}
            )  # fmt: skip
            bar.set_postfix_str(f"loss {train_loss:.4f}", refresh=False)
            if path is not None:
                _save_checkpoint(path, epoch + 1, fingerprint, trained, control, optimizer, history)
        complete(bar)
    finally:
        bar.close()
        work.train(was_training)

    full_control = {}
    for k in state_a:
        owner = owners[k]
        if owner in control:  # in A's dtype (a float32 master copy rounded back)
            full_control[k] = control[owner].detach().to(state_a[k].dtype, copy=True)
        else:  # integer buffers (A's), floating entries outside the state's owners
            full_control[k] = midpoint[k].clone()
    return CurveFit(
        curve=Curve(kind, state_a, state_b, full_control),
        settings=s,
        history=history,
        epochs_done=max(start, stop),
        steps_per_epoch=steps,
        resumed_from_epoch=resumed,
        seconds=time.perf_counter() - started,
    )


def _control_start(
    key: str, state_a: StateDict, state_b: StateDict, midpoint: StateDict, trained: bool
) -> torch.Tensor:
    """θ_C's entry ``key`` at the start: the midpoint, in float32 for a trained half-precision
    entry (its master copy, the exact midpoint of the two half-precision endpoints)."""
    if trained and state_a[key].dtype in (torch.float16, torch.bfloat16):
        a, b = state_a[key], state_b[key].to(state_a[key].device)
        start = 0.5 * a.float() + 0.5 * b.float()
    else:
        start = midpoint[key].clone()
    return start.requires_grad_(trained)


class _Point:
    """θ(t)'s parameters and floating buffers for ``functional_call``, one tensor per name,
    rewritten in place at every step (:func:`lmc.merge.curves.combine_into`, the same values
    as :meth:`Curve.point`; half precision via float32). The trained ones are leaves that
    take the loss's gradient, which :meth:`to_control` turns into θ_C's: θ(t) depends on θ_C
    through ``w_C(t) θ_C`` only, so ∂L/∂θ_C = w_C(t) ∂L/∂θ(t). A BatchNorm in training mode
    updates its running statistics in place here; they are overwritten at the next step."""

    def __init__(
        self,
        state_a: StateDict,
        state_b: StateDict,
        control: StateDict,
        names: list[str],
        trained: list[str],
    ) -> None:
        self.a, self.b, self.control, self.trained = state_a, state_b, control, trained
        self.tensors = {k: torch.empty_like(state_a[k]).requires_grad_(k in trained) for k in names}

    @torch.no_grad()
    def load(self, w: tuple[float, float, float]) -> dict[str, torch.Tensor]:
        """θ(t) for the weights ``w``, the gradients of the last step cleared."""
        for k, p in self.tensors.items():
            p.grad = None
            if p.dtype in (torch.float16, torch.bfloat16):
                p.copy_(combine(w, self.a[k], self.control[k], self.b[k]))
            else:
                combine_into(p, w, self.a[k], self.control[k], self.b[k])
        return self.tensors

    @torch.no_grad()
    def to_control(self, wc: float) -> None:
        """θ_C's gradients: w_C times the point's (the point's gradient tensors, scaled in
        place, become θ_C's; a sparse one made dense, a half-precision one cast to its float32
        master copy's dtype)."""
        for k in self.trained:
            g = self.tensors[k].grad
            if g is not None:
                if g.is_sparse:
                    g = g.to_dense()
                if g.dtype != self.control[k].dtype:
                    g = g.to(self.control[k].dtype)
                g = g.mul_(wc)
            self.control[k].grad = g


def _optimizer(
    s: CurveSettings, tensors: list[torch.Tensor], device: torch.device
) -> torch.optim.Optimizer:
    """SGD or Adam on θ_C's trained tensors, with the fused kernels where PyTorch has them
    (as :func:`lmc.train.loop.make_optimizer`)."""
    kwargs: dict[str, Any] = {"lr": s.lr, "weight_decay": s.weight_decay}
    if s.optimizer == "sgd":
        cls, kwargs["momentum"] = torch.optim.SGD, s.momentum
    else:
        cls, kwargs["betas"] = torch.optim.Adam, (s.momentum, 0.999)
    if device.type in ("cpu", "cuda"):
        try:
            return cls(tensors, fused=True, **kwargs)
        except (RuntimeError, TypeError):
            pass
    return cls(tensors, **kwargs)


class _seeded_rng:
    """The global RNG (CPU, and ``device`` when it is a GPU) seeded from ``seed`` and ``epoch``
    for the block and restored afterwards: any dropout draws the same masks after a resume."""

    def __init__(self, device: torch.device, seed: int, epoch: int) -> None:
        devices = [device] if device.type == "cuda" else []
        self._fork = torch.random.fork_rng(devices=devices)
        self._seed = int(epoch_generator(seed, epoch, _DROPOUT_SALT).initial_seed())

    def __enter__(self) -> None:
        self._fork.__enter__()
        torch.manual_seed(self._seed)

    def __exit__(self, *exc: Any) -> None:
        self._fork.__exit__(*exc)


# -- checkpoints ---------------------------------------------------------------------------


def _digest(meta_json: str, tensors: Mapping[str, torch.Tensor]) -> str:
    return hashlib.sha256((meta_json + state_digest(tensors)).encode()).hexdigest()


def _save_checkpoint(
    path: Path,
    epoch: int,
    fingerprint: str,
    names: list[str],
    control: StateDict,
    optimizer: torch.optim.Optimizer,
    history: list[dict[str, Any]],
) -> None:
    """θ_C's trained tensors (``control.<name>``) and the optimizer's tensors
    (``optim.<index>.<key>``) in one safetensors file; the rest as JSON in its metadata."""
    optim_tensors, optim_meta = flatten_optimizer(optimizer.state_dict())
    tensors = {f"control.{k}": control[k].detach() for k in names} | optim_tensors
    tensors = {k: v.detach().to("cpu").contiguous().clone() for k, v in tensors.items()}
    meta = {
        "epoch": epoch,
        "fingerprint": fingerprint,
        "names": names,
        **optim_meta,
        "history": history,
    }
    meta_json = json.dumps(meta, sort_keys=True)
    metadata = {_META_KEY: meta_json, _DIGEST_KEY: _digest(meta_json, tensors)}
    save_tensors(path, tensors, metadata=metadata)


def _load_checkpoint(path: Path, fingerprint: str, names: list[str]) -> dict[str, Any] | None:
    """The checkpoint at ``path`` as {epoch, control, optimizer, history}; ``None`` when there
    is none or it is damaged (warned about: training starts afresh); ``LmcError`` when it is
    whole but belongs to another curve (other endpoints, data or settings)."""
    if not os.path.lexists(path):
        return None
    check_regular_file(path, "curve checkpoint")  # never wait on a FIFO
    try:
        tensors = load_tensors(path)  # on the CPU (the optimizer moves its state itself)
        with safe_open(str(path), "pt") as f:
            metadata = f.metadata() or {}
        meta_json = metadata[_META_KEY]
        if _digest(meta_json, tensors) != metadata.get(_DIGEST_KEY):
            raise ValueError("its SHA-256 does not match its contents (damaged)")
        meta = json.loads(meta_json)
    except (LmcError, KeyError, ValueError, SafetensorError, OSError) as exc:
        warnings.warn(
            f"ignoring the curve checkpoint {path}: {exc}; fitting from the start",
            LmcWarning,
            stacklevel=3,
        )
        return None
    if meta.get("fingerprint") != fingerprint or meta.get("names") != names:
        raise LmcError(
            f"the curve checkpoint {path} belongs to another curve (other endpoints, data or "
            "settings): remove it or give another checkpoint folder"
        )
    return {
        "epoch": int(meta["epoch"]),
        "control": {k: tensors[f"control.{k}"] for k in names},
        "optimizer": unflatten_optimizer(tensors, meta),
        "history": list(meta["history"]),
    }


def remove_curve_checkpoint(checkpoint_dir: str | os.PathLike) -> None:
    """Remove :data:`CURVE_CHECKPOINT` from ``checkpoint_dir`` (nothing when absent)."""
    (Path(checkpoint_dir) / CURVE_CHECKPOINT).unlink(missing_ok=True)


# -- the control point as a run ------------------------------------------------------------


def endpoint_record(
    source: Run | Mapping[str, torch.Tensor], name: str | None = None
) -> dict[str, Any]:
    """How a curve's config names an endpoint: a :class:`lmc.store.Run` by its folder name,
    its config's hash and its weights' SHA-256 (from its manifest); a state dict by ``name``
    (e.g. a weight file's path) and :func:`lmc.merge.curves.state_digest`."""
    if isinstance(source, Run):
        entry = (source.manifest or {}).get(MODEL_FILE) or {}
        return {
            "run": source.name,
            "config_hash": config_hash(source.config),
            "model_sha256": entry.get("sha256"),
        }
    return {"name": name, "state_sha256": state_digest(source)}


def curve_config(
    settings: CurveSettings,
    *,
    a: Mapping[str, Any],
    b: Mapping[str, Any],
    task: Task | str = "classification",
    model: str | None = None,
    model_options: Mapping[str, Any] | None = None,
    dataset: str | None = None,
    dataset_options: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The config of a stored control point (what its run folder's name hashes): ``kind``
    ``"curve"``, the ``curve`` settings (:class:`CurveSettings`, its ``kind`` the path kind),
    the ``endpoints`` ``a`` and ``b`` (:func:`endpoint_record`, or any JSON record, e.g. with
    the alignment applied to B), the ``task``, and the architecture and data (``model`` and
    ``model_options`` of the zoo, so that ``load_run(...).build_model()`` is the model at θ_C;
    ``None`` for a user's model)."""
    return {
        "kind": "curve",
        "model": model,
        "model_options": dict(model_options) if model_options is not None else None,
        "dataset": dataset,
        "dataset_options": dict(dataset_options or {}),
        "task": get_task(task).name,
        "curve": settings.to_dict(),
        "endpoints": {"a": dict(a), "b": dict(b)},
    }


def curve_config_for_runs(
    run_a: Run, run_b: Run, settings: CurveSettings, *, task: Task | str = "classification"
) -> dict[str, Any]:
    """:func:`curve_config` for two stored runs: the architecture and data are A's."""
    config = run_a.config
    return curve_config(
        settings,
        a=endpoint_record(run_a),
        b=endpoint_record(run_b),
        task=task,
        model=config.get("model"),
        model_options=config.get("model_options"),
        dataset=config.get("dataset"),
        dataset_options=config.get("dataset_options"),
    )


def save_curve(
    fit: CurveFit,
    config: Mapping[str, Any],
    *,
    store: RunStore | None = None,
    folder: str | os.PathLike | None = None,
    metrics: Mapping[str, Any] | None = None,
) -> Run:
    """Store the control point of ``fit`` as a run: in ``store`` (its folder named by the
    config's hash, ``<model>-<dataset>-curve-<hash>``) or in ``folder``; exactly one of them.
    The folder gets ``config.json`` (``config``, from :func:`curve_config`),
    ``model.safetensors`` (θ_C as a whole state dict), ``metrics.json`` (``fit.metrics()``
    unless ``metrics`` is given; ``"status": "finished"``) and the manifest, written beside
    its place and renamed in as one unit (:func:`lmc.store.output_dir`). Returns the run
    (:func:`lmc.store.load_run` reads it)."""
    if (store is None) == (folder is None):
        raise LmcError("save_curve needs exactly one of store and folder")
    config = dict(config)
    if config.get("kind") != "curve" or "curve" not in config:
        raise LmcError("save_curve needs a curve's config (lmc.merge.curve_config)")
    state = fit.curve.control
    if state is None:
        raise LmcError("a line has no control point to store")
    metrics = dict(metrics) if metrics is not None else fit.metrics()
    if store is not None:
        return store.save(config, state, metrics)
    metrics = {**metrics, "status": "finished", "manifest": MANIFEST_FILE}
    with output_dir(folder, replaces=(CONFIG_FILE, METRICS_FILE, MANIFEST_FILE)) as tmp:
        records = {CONFIG_FILE: write_json(tmp / CONFIG_FILE, config)}
        records[MODEL_FILE] = save_tensors(tmp / MODEL_FILE, state)
        records[METRICS_FILE] = write_json(tmp / METRICS_FILE, metrics)
        write_manifest(tmp, records)
    return load_run(folder)


def load_curve(
    run: Run | str | os.PathLike,
    state_a: Mapping[str, torch.Tensor],
    state_b: Mapping[str, torch.Tensor],
) -> Curve:
    """The :class:`Curve` of a stored control point (:func:`save_curve`) between ``state_a``
    and ``state_b``. Endpoints recorded by their state's digest are checked: ``LmcError``
    when a given state is not the one the curve was fitted between."""
    if not isinstance(run, Run):
        run = load_run(run)
    config = run.config
    if config.get("kind") != "curve" or "curve" not in config:
        raise LmcError(f"{run.path} is not a stored curve (its config's kind is not 'curve')")
    for side, state in (("a", state_a), ("b", state_b)):
        recorded = config.get("endpoints", {}).get(side, {}).get("state_sha256")
        if recorded is not None and recorded != state_digest(state):
            raise LmcError(
                f"the curve {run.path} was fitted from other weights for endpoint "
                f"{side.upper()} than the ones given"
            )
    device = next(iter(state_a.values())).device if state_a else "cpu"
    return Curve(config["curve"]["kind"], state_a, state_b, run.state_dict(device=device))


__all__ = [
    "CURVE_CHECKPOINT",
    "CURVE_OPTIMIZERS",
    "CURVE_SCHEDULES",
    "CurveFit",
    "CurveSettings",
    "curve_config",
    "curve_config_for_runs",
    "endpoint_record",
    "fit_curve",
    "load_curve",
    "remove_curve_checkpoint",
    "save_curve",
]
