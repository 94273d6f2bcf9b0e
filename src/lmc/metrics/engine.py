"""Engines that compute the logits of points theta(lam) of a path on a split.

Path: theta(lam) = (1 - lam) * theta_A + lam * theta_B (lam = 0 is A). An engine turns a list of
lambdas into chunks ``(lams, z)``: ``z`` is the float32 logits of those points on every example
of the split, shape ``(len(lams), N, C)`` (or the model's output layout after the example axis,
e.g. ``(len(lams), N, T, C)`` for a token model; :mod:`lmc.data.tasks` says how to read it),
on the models' device. Two engines, chosen once per path by :func:`select_engine`:

- :class:`BatchedEngine` (``batched``): the points' weights are stacked (``lerp_stack``), in
  chunks of lambdas whose stacked weights stay within ``max_stack_bytes``, and evaluated
  together in one batched forward per batch of examples (:func:`stacked_logits`): for a plain
  chain of Linear layers and activations the fast path of :mod:`lmc.metrics.chain`, otherwise
  ``torch.vmap`` over ``torch.func.functional_call`` (every state-dict entry passed, so tied
  weights such as a GPT's shared embedding and head are given twice with equal values). It
  cannot recompute BatchNorm statistics per point.
- :class:`LoopEngine` (``loop``): one plain forward over the split per lambda, of the model
  ``prepare(lam)`` returns (e.g. theta(lam) with its BatchNorm statistics reset); the logits
  are buffered (up to ``LOGIT_BUFFER_BYTES``) so that their metrics are computed together.

Both give the same logits within float32 rounding. Examples per forward pass:
:func:`auto_batch_size` unless a batch size is given.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Mapping

import torch
from torch import nn

from lmc.config import LmcError, progress
from lmc.merge import lerp_into, lerp_stack

from .chain import ChainPlan, ChainWorkspace, chain_forward, chain_plan

#: ``method`` values of :func:`select_engine` (and of :func:`lmc.metrics.evaluate_path`).
#: How a path is evaluated (``PathSettings.method``); ``METHODS`` is its older name.
ENGINES = ("auto", "batched", "loop")
#: The older name of :data:`ENGINES` (kept for code that imports it).
METHODS = ENGINES
#: Default examples per forward pass (per lambda in the batched engine).
TARGET_ROWS = 2048
#: Bound on the largest activation tensor of one forward pass when choosing the batch size.
ACTIVATION_BUDGET_BYTES = 256 << 20
#: Bound on the logits the loop engine buffers before handing them on.
LOGIT_BUFFER_BYTES = 256 << 20

StateDict = Mapping[str, torch.Tensor]
#: One engine step: the lambdas and their float32 logits, shape (len(lams), N, ..., C).
Chunk = tuple[list[float], torch.Tensor]


def _spans(n: int, batch_size: int) -> list[tuple[int, int]]:
    """``ceil(n / batch_size)`` contiguous ``(start, stop)`` spans of (nearly) equal size.

    Equal sizes keep every matrix product the same shape (no small, slow remainder batch).
    """
    count = max(1, -(-n // max(1, batch_size)))
    bounds = [round(i * n / count) for i in range(count + 1)]
    return [(bounds[i], bounds[i + 1]) for i in range(count) if bounds[i + 1] > bounds[i]]


@torch.inference_mode()
def model_logits(
    model: nn.Module, x: torch.Tensor, batch_size: int, device: torch.device
) -> torch.Tensor:
    """The model's float32 logits ``(N, ..., C)`` on every example of ``x`` ``(N, ...)``: one plain
    forward per batch of ``batch_size`` examples (moved to ``device``)."""
    out = [model(x[s:e].to(device, non_blocking=True)) for s, e in _spans(len(x), batch_size)]
    return torch.cat(out).float()


def one_name_per_slot(model: nn.Module, names: list[str]) -> list[str]:
    """``names`` (state-dict keys of ``model``) with one name kept per (module, attribute) slot:
    a submodule registered under two names (``self.a = self.b = layer``) appears twice in the
    state dict, and ``functional_call(..., tie_weights=False)`` given both would swap the one
    attribute twice and restore it to the swapped-in tensor. Parameters tied across two modules
    (a head sharing the embedding's weight) are two slots and both stay."""
    seen: set[tuple[int, str]] = set()
    out = []
    for name in names:
        prefix, _, attr = name.rpartition(".")
        owner = model.get_submodule(prefix) if prefix else model
        slot = (id(owner), attr)
        if slot not in seen:
            seen.add(slot)
            out.append(name)
    return out


def stacked_logits(
    model: nn.Module,
    stacked: StateDict,
    x: torch.Tensor,
    batch_size: int,
    device: torch.device,
    plan: ChainPlan | None = None,
) -> torch.Tensor:
    """Float32 logits ``(k, N, ..., C)`` of k stacked states ``{name: (k, *shape)}`` of ``model``'s
    architecture on ``x`` ``(N, ...)``, one batched forward per batch of examples:
    :func:`lmc.metrics.chain.chain_forward` when ``plan`` is given, else ``torch.vmap`` over
    ``torch.func.functional_call`` (``model``'s own weights are not used or changed)."""
    from torch.func import functional_call, vmap

    def forward(params: dict[str, torch.Tensor], xb: torch.Tensor) -> torch.Tensor:
        return functional_call(model, params, (xb,), tie_weights=False)

    if plan is not None:
        batched = functools.partial(chain_forward, plan, workspace=ChainWorkspace())
    else:
        batched = vmap(forward, in_dims=(0, None))
    slots = set(one_name_per_slot(model, list(stacked)))
    params = {k: v for k, v in stacked.items() if k in slots}
    out: torch.Tensor | None = None
    with torch.inference_mode():
        for s, e in _spans(len(x), batch_size):
            z = batched(params, x[s:e].to(device, non_blocking=True))
            if out is None:
                out = torch.empty(
                    (z.shape[0], len(x), *z.shape[2:]), dtype=torch.float32, device=device
                )
            out[:, s:e] = z
    assert out is not None
    return out


def activation_bytes(model: nn.Module, x: torch.Tensor, device: torch.device) -> int:
    """Bytes of the largest module output per example, from a forward pass on 2 examples."""
    largest = 0

    def hook(_module, _inputs, out):
        nonlocal largest
        if isinstance(out, torch.Tensor) and out.dim() > 0 and out.shape[0] > 0:
            largest = max(largest, out[0].numel() * out.element_size())

    handles = [m.register_forward_hook(hook) for m in model.modules()]
    try:
        with torch.inference_mode():
            model(x[:2].to(device))
    finally:
        for h in handles:
            h.remove()
    return max(1, largest)


def auto_batch_size(
    model: nn.Module,
    x: torch.Tensor,
    k: int,
    device: torch.device,
    *,
    target_rows: int = TARGET_ROWS,
    budget_bytes: int = ACTIVATION_BUDGET_BYTES,
) -> int:
    """Examples per forward pass for ``k`` models evaluated together when no batch size is given.

    ``target_rows`` (default ``TARGET_ROWS`` = 2048: matrix products of that many rows run near
    the machine's matmul rate), fewer when the largest activation of the ``k`` stacked models,
    ``k * rows * activation_bytes(model, x, device)`` bytes, would exceed ``budget_bytes``
    (default ``ACTIVATION_BUDGET_BYTES`` = 256 MiB); at least 16, at most ``len(x)``.
    """
    per_example = k * activation_bytes(model, x, device)
    rows = min(target_rows, max(16, budget_bytes // per_example))
    return int(min(len(x), rows))


def _state_bytes(state: StateDict) -> int:
    return sum(t.numel() * t.element_size() for t in state.values())


class BatchedEngine:
    """Stacked weights, one batched forward per batch of examples (see module doc).

    ``model``: a module of the architecture (its weights are not used); ``state_a``,
    ``state_b``: the endpoints' state dicts on the model's device; ``x``: the split's inputs
    ``(N, ...)``; ``batch_size``: examples per forward (default :func:`auto_batch_size` for each
    chunk's k); ``max_stack_bytes``: bound on the stacked weights of one chunk (at least one
    point per chunk); ``plan``: a :func:`lmc.metrics.chain.chain_plan` for the fast path, or
    ``None`` for ``torch.vmap``.
    """

    name = "batched"

    def __init__(
        self,
        model: nn.Module,
        state_a: StateDict,
        state_b: StateDict,
        x: torch.Tensor,
        device: torch.device,
        *,
        batch_size: int | None = None,
        max_stack_bytes: int = 1 << 30,
        plan: ChainPlan | None = None,
    ) -> None:
        self.model, self.state_a, self.state_b = model, state_a, state_b
        self.x, self.device = x, device
        self.batch_size, self.max_stack_bytes, self.plan = batch_size, max_stack_bytes, plan

    def chunk_size(self, n: int) -> int:
        """Lambdas per chunk for ``n`` lambdas: as many as ``max_stack_bytes`` holds, ≥ 1."""
        per_point = max(1, _state_bytes(self.state_a))
        return max(1, min(n, self.max_stack_bytes // per_point))

    def probe(self) -> Exception | None:
        """The error a batched forward of theta(½) on 2 examples raises (e.g. an operation
        ``torch.vmap`` cannot batch, such as ``.item()``), or ``None`` when it works."""
        try:
            stacked = lerp_stack(self.state_a, self.state_b, [0.5])
            stacked_logits(self.model, stacked, self.x[:2], 2, self.device, self.plan)
        except (RuntimeError, NotImplementedError) as exc:
            return exc
        return None

    def run(self, lams: list[float], *, quiet: bool = True) -> Iterator[Chunk]:
        """The logits of theta(lam) for ``lams``, chunk by chunk."""
        size = self.chunk_size(len(lams))
        chunks = [lams[i : i + size] for i in range(0, len(lams), size)]
        for chunk in progress(chunks, quiet=quiet, desc="path (batched)"):
            bs = self.batch_size or auto_batch_size(self.model, self.x, len(chunk), self.device)
            stacked = lerp_stack(self.state_a, self.state_b, chunk)
            try:
                z = stacked_logits(self.model, stacked, self.x, bs, self.device, self.plan)
            except (RuntimeError, NotImplementedError) as exc:
                raise LmcError(
                    f"batched path evaluation failed ({exc}); use method='loop'"
                ) from exc
            del stacked
            yield chunk, z


class LoopEngine:
    """One plain forward over the split per lambda, of the model ``prepare(lam)`` returns.

    ``prepare``: loads theta(lam) into a working module and returns it (and may fix its
    BatchNorm statistics); ``batch_size``: examples per forward; logits are handed on in chunks
    of at most ``buffer_bytes`` (at least one lambda per chunk); ``desc``: the progress label.
    """

    name = "loop"

    def __init__(
        self,
        prepare: Callable[[float], nn.Module],
        x: torch.Tensor,
        device: torch.device,
        *,
        batch_size: int,
        buffer_bytes: int = LOGIT_BUFFER_BYTES,
        desc: str = "path (loop)",
    ) -> None:
        self.prepare, self.x, self.device = prepare, x, device
        self.batch_size, self.buffer_bytes, self.desc = batch_size, buffer_bytes, desc

    def run(self, lams: list[float], *, quiet: bool = True) -> Iterator[Chunk]:
        """The logits of theta(lam) for ``lams``, buffered into chunks."""
        pending: list[tuple[float, torch.Tensor]] = []
        for lam in progress(lams, quiet=quiet, desc=self.desc):
            z = model_logits(self.prepare(lam), self.x, self.batch_size, self.device)
            pending.append((lam, z))
            if len(pending) * pending[0][1].numel() * 4 >= self.buffer_bytes:
                yield [p[0] for p in pending], torch.stack([p[1] for p in pending])
                pending = []
        if pending:
            yield [p[0] for p in pending], torch.stack([p[1] for p in pending])


PathEngine = BatchedEngine | LoopEngine


def _load_point(model: nn.Module, state_a: StateDict, state_b: StateDict, lam: float) -> nn.Module:
    """theta(lam) loaded into ``model`` (the loop's default ``prepare``)."""
    lerp_into(model, state_a, state_b, lam)
    return model


def _vmap_is_slow(model: nn.Module, device: torch.device) -> bool:
    """Whether ``model`` has attention layers (a module whose class name says so) on the CPU."""
    if torch.device(device).type != "cpu":
        return False
    return any("attention" in type(m).__name__.lower() for m in model.modules())


def select_engine(
    method: str,
    *,
    bn_mode: str,
    model: nn.Module,
    state_a: StateDict,
    state_b: StateDict,
    x: torch.Tensor,
    device: torch.device,
    prepare: Callable[[float], nn.Module] | None = None,
    batch_size: int | None = None,
    max_stack_bytes: int = 1 << 30,
    fast: bool = True,
) -> PathEngine:
    """The engine for a path, chosen once, before any point is evaluated.

    - ``method="loop"``, or ``"auto"`` with a resolved BatchNorm mode other than ``none``
      (statistics must be recomputed per point): a :class:`LoopEngine` over ``prepare``
      (default: load theta(lam) into ``model`` with :func:`lmc.merge.lerp_into`).
    - ``"auto"`` for a model with attention layers on the CPU, unless the chain fast path takes
      it: the loop too (``torch.vmap`` has no batching rule for CPU
      ``scaled_dot_product_attention`` and runs it through a slower fallback;
      ``benchmarks/attention_path_eval.py`` measures both).
    - otherwise a :class:`BatchedEngine` (the chain fast path when ``fast`` and
      :func:`lmc.metrics.chain.chain_plan` accepts ``model``, else ``torch.vmap``), after a
      probe on 2 examples (:meth:`BatchedEngine.probe`). When the probe fails ``auto`` falls
      back to the loop and ``batched`` is an ``LmcError``; ``batched`` with BatchNorm
      recomputation is an ``LmcError`` too.

    ``model`` is a working module of the endpoints' architecture (the loop overwrites its
    weights); ``state_a``/``state_b`` the endpoints' states on its device; ``x`` the split's
    inputs; ``batch_size`` examples per forward (default :func:`auto_batch_size`).
    """
    if method not in ENGINES:
        raise LmcError(f"unknown path evaluation method {method!r}: use {', '.join(ENGINES)}")
    if method == "batched" and bn_mode != "none":
        raise LmcError(
            f"the batched method cannot recompute BatchNorm statistics per lambda (bn={bn_mode!r});"
            " use method='loop'"
        )
    plan = chain_plan(model) if fast and method != "loop" else None
    if method == "auto" and plan is None and _vmap_is_slow(model, device):
        method = "loop"
    if method == "batched" or (method == "auto" and bn_mode == "none"):
        engine = BatchedEngine(
            model,
            state_a,
            state_b,
            x,
            device,
            batch_size=batch_size,
            max_stack_bytes=max_stack_bytes,
            plan=plan,
        )
        failure = engine.probe()
        if failure is None:
            return engine
        if method == "batched":
            raise LmcError(
                f"batched path evaluation failed ({failure}); use method='loop'"
            ) from failure
    if prepare is None:
        prepare = functools.partial(_load_point, model, state_a, state_b)
    loop_bs = batch_size or auto_batch_size(model, x, 1, device)
    return LoopEngine(prepare, x, device, batch_size=loop_bs, desc=f"path (bn {bn_mode})")
