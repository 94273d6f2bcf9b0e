"""Symmetry transforms of one group of units: permutation, orthogonal, invertible.

A transform ``T`` of a group of ``n`` units is an invertible ``n x n`` matrix ``M``; applying
it maps the units' coordinates ``u -> M u``. The convention extends
:mod:`lmc.perm.symmetries.permutations`'s: a :class:`Permutation` ``p`` is ``M[i, p[i]] = 1`` (new
unit ``i`` = old unit ``p[i]``).

Kinds, each a special case of the next (``KINDS``):

- ``permutation`` -- :class:`Permutation`, an int64 index tensor (what ``lmc.perm`` matching
  returns per group);
- ``orthogonal`` -- :class:`Orthogonal`, ``Mᵀ M = I``;
- ``invertible`` -- :class:`Invertible`, any well-conditioned invertible ``M``.

Orthogonal and invertible maps are *head-structured*: ``H`` heads of ``d = n / H`` units,
``head`` (a permutation of the heads: new head ``a`` is old head ``head[a]``) and ``blocks``
``(H, d, d)`` (float64): ``new[a] = blocks[a] @ old[head[a]]``, i.e. ``M`` has block
``(a, head[a])`` equal to ``blocks[a]``. ``H = 1`` is a dense map (the residual stream);
``H > 1`` a map within each head that may also reorder whole heads (q/k, v/o).

How one axis of a tensor transforms depends on its *role* (see
:mod:`lmc.perm.symmetries.symmetry_spec`):

- ``out`` (covariant): the axis holds coordinates of the units -- a layer's output rows, its
  bias, an embedding's features, the q side of q/k: ``x -> M x``;
- ``in`` (contravariant): the axis pairs with the units -- a layer's input columns, the k side
  of q/k: ``x -> M⁻ᵀ x`` (so ``W -> W M⁻¹`` for a weight ``W`` that reads the units);
- ``norm``: an elementwise parameter (a norm's gain): only a permutation may act on it.

For permutations and orthogonal maps ``M⁻ᵀ = M``, so ``out`` and ``in`` act alike. Applying
the transform to every axis of a group, each by its role, keeps a network's function whenever
``M`` is in the group's symmetry (e.g. any orthogonal ``M`` on a canonical transformer's
stream; any invertible ``A`` on q/k within heads: ``qᵀk = (A q)ᵀ (A⁻ᵀ k)``).

Composition: ``first.then(second)`` (also :func:`compose`) applies ``first`` then ``second``;
its matrix is ``M_second M_first``; a permutation composed with a head-structured map is taken
as the orthogonal map with 0/1 blocks of the same heads. ``inverse()`` undoes a transform.
Each kind has a seeded ``random(...)`` and saves to / loads from a safetensors file (tensors
plus a JSON description in its metadata; nothing is pickled).
"""

from __future__ import annotations

import json
import os
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

import torch
from safetensors import SafetensorError, safe_open

from lmc.config import LmcError
from lmc.store import load_tensors, save_tensors

from .head_permutations import compose_heads, split_heads

KINDS = ("permutation", "orthogonal", "invertible")
#: Kinds restricted in structure as well as in generality: ``rope`` (per frequency plane of a
#: head, one rotation and scaling; an invertible map, an orthogonal one at unit modulus; planes
#: are dims ``p`` and ``p + d/2``, the ``rotate_half`` layout) and ``rope_interleaved`` (the
#: same with planes of dims ``2p`` and ``2p + 1``, GPT-J's ``rotate_every_two`` layout)
STRUCTURED_KINDS = ("rope", "rope_interleaved")
ROLES = ("out", "in", "norm")
ORTHOGONAL_TOL = 1e-6  # max |MᵀM - I| entry accepted as orthogonal (float64 blocks)
MAX_CONDITION = 1e8  # condition number above which a block is refused as not invertible
METADATA_KEY = "lmc.transform"
_T = TypeVar("_T", bound="Transform")


def kind_rank(kind: str) -> int:
    """0 for permutation, 1 for orthogonal, 2 for invertible (the generality order); a
    structured kind ranks as the general kind its maps belong to (``rope``,
    ``rope_interleaved``: invertible)."""
    if kind in STRUCTURED_KINDS:
        return 2
    if kind not in KINDS:
        raise LmcError(f"unknown transform kind {kind!r}: choose one of {', '.join(KINDS)}")
    return KINDS.index(kind)


def _generator(seed: int | torch.Generator) -> torch.Generator:
    if isinstance(seed, torch.Generator):
        return seed
    return torch.Generator().manual_seed(int(seed))


def _check_role(role: str) -> None:
    if role not in ROLES:
        raise LmcError(f"unknown axis role {role!r}: choose one of {', '.join(ROLES)}")


def _check_perm(p: torch.Tensor, what: str) -> torch.Tensor:
    p = torch.as_tensor(p)
    if p.dim() != 1 or p.is_floating_point() or p.is_complex():
        raise LmcError(f"{what} must be a 1-D integer index tensor, got shape {list(p.shape)}")
    p = p.detach().long().cpu()
    if not torch.equal(torch.sort(p).values, torch.arange(p.numel())):
        raise LmcError(f"{what} is not a permutation of 0..{p.numel() - 1}")
    return p


class Transform(ABC):
    """One group's transform (see the module docstring). Immutable; tensors live on the CPU."""

    kind: ClassVar[str]

    @property
    @abstractmethod
    def size(self) -> int:
        """Number of units ``n``."""

    @property
    @abstractmethod
    def heads(self) -> int:
        """Number of heads ``H`` the map is block-structured by (1: unstructured / dense)."""

    @abstractmethod
    def matrix(self) -> torch.Tensor:
        """The dense ``(n, n)`` float64 matrix ``M`` (``u -> M u``)."""

    @abstractmethod
    def act(self, x: torch.Tensor, axis: int, role: str = "out", repeat: int = 1) -> torch.Tensor:
        """``x`` with its ``axis`` (``n * repeat`` long; each unit owns ``repeat`` consecutive
        indices) transformed by its ``role``; returned in ``x``'s dtype and device."""

    @abstractmethod
    def inverse(self) -> Transform:
        """The transform ``T⁻¹`` (``T.then(T.inverse())`` is the identity)."""

    @abstractmethod
    def then(self, second: Transform) -> Transform:
        """This transform followed by ``second`` (matrix ``M_second M_self``)."""

    @abstractmethod
    def to_tensors(self) -> dict[str, torch.Tensor]:
        """The tensors that define the transform (names without any group prefix)."""

    @classmethod
    def random(
        cls: type[_T],
        n: int,
        seed: int | torch.Generator,
        heads: int = 1,
        head: torch.Tensor | None = None,
        **options: float,
    ) -> _T:
        """A seeded random transform of this kind over ``n`` units, block-structured by
        ``heads`` heads of ``n / heads`` units (1: unstructured): whole heads move by ``head``
        (default: a random order of the heads, drawn first), then each kind draws its own part
        (:meth:`_random`). ``options``: the kind's own settings of the draw (``spread`` for
        :class:`Invertible` and :class:`RopePlanes`); a transform of the class it is called on."""
        gen, d, head = _draw_setup(n, seed, heads, head)
        return cls._random(gen, n, heads, d, head, **options)

    @classmethod
    @abstractmethod
    def _random(
        cls, gen: torch.Generator, n: int, heads: int, d: int, head: torch.Tensor, **options: float
    ) -> Transform:
        """:meth:`random`'s draw once the head order is known: ``d`` is the head dimension,
        ``head`` the order of the heads (the random one when :meth:`random` was given none)."""

    def to_json(self) -> dict[str, Any]:
        """The JSON description saved beside the tensors: kind, size, heads."""
        return {"kind": self.kind, "size": self.size, "heads": self.heads}

    @staticmethod
    def from_parts(meta: Mapping[str, Any], tensors: Mapping[str, torch.Tensor]) -> Transform:
        """Rebuild a transform from :meth:`to_json` and :meth:`to_tensors` (checked)."""
        kind = meta.get("kind")
        try:
            if kind == "permutation":
                out: Transform = Permutation(tensors["perm"])
            elif kind in ("orthogonal", "invertible", *STRUCTURED_KINDS):
                cls = {"orthogonal": Orthogonal, "invertible": Invertible, **PLANE_CLASSES}[kind]
                out = cls(tensors["head"], tensors["blocks"])
            else:
                raise LmcError(f"unknown transform kind {kind!r} in a saved transform")
        except KeyError as exc:
            raise LmcError(f"a saved {kind} transform lacks its tensor {exc.args[0]!r}") from exc
        if "size" in meta and int(meta["size"]) != out.size:
            raise LmcError(f"a saved {kind} transform says size {meta['size']}, holds {out.size}")
        return out

    def save(self, path: str | os.PathLike) -> None:
        """Write the transform to a ``.safetensors`` file (JSON description in its metadata)."""
        save_tensors(path, self.to_tensors(), metadata={METADATA_KEY: json.dumps(self.to_json())})

    @staticmethod
    def load(path: str | os.PathLike) -> Transform:
        """Read a transform written by :meth:`save`."""
        tensors, meta = read_tensor_file(path, METADATA_KEY)
        if meta is None:
            raise LmcError(f"{path} holds no lmc transform (no {METADATA_KEY!r} metadata)")
        return Transform.from_parts(meta, tensors)

    def is_identity(self) -> bool:
        return bool(torch.equal(self.matrix(), torch.eye(self.size, dtype=torch.float64)))


def read_tensor_file(
    path: str | os.PathLike, key: str
) -> tuple[dict[str, torch.Tensor], dict[str, Any] | None]:
    """A safetensors file's tensors and the JSON stored under metadata ``key`` (or ``None``)."""
    tensors = load_tensors(path)
    try:
        with safe_open(str(path), framework="pt") as f:
            metadata = f.metadata() or {}
    except (SafetensorError, OSError) as exc:
        raise LmcError(f"{path} is not a readable safetensors file ({exc})") from exc
    if key not in metadata:
        return tensors, None
    try:
        return tensors, json.loads(metadata[key])
    except json.JSONDecodeError as exc:
        raise LmcError(f"{path}: the {key!r} metadata is not valid JSON ({exc})") from exc


# ---- permutations -----------------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class Permutation(Transform):
    """A permutation as ``lmc.perm``'s index tensor: new unit ``i`` = old unit ``perm[i]``."""

    perm: torch.Tensor
    kind: ClassVar[str] = "permutation"

    def __post_init__(self) -> None:
        object.__setattr__(self, "perm", _check_perm(self.perm, "a permutation"))

    @property
    def size(self) -> int:
        return self.perm.numel()

    @property
    def heads(self) -> int:
        return 1

    @classmethod
    def identity(cls, n: int) -> Permutation:
        return cls(torch.arange(n))

    @classmethod
    def _random(
        cls, gen: torch.Generator, n: int, heads: int, d: int, head: torch.Tensor
    ) -> Permutation:
        """A uniformly random permutation; with ``heads > 1`` a block-structured one (whole
        heads move by ``head``, or a random head permutation, and each head's dims permute)."""
        if heads == 1:
            return cls(torch.randperm(n, generator=gen))
        head = _check_perm(head, "head")
        within = torch.stack([torch.randperm(d, generator=gen) for _ in range(heads)])
        return cls(compose_heads(head, within))

    def matrix(self) -> torch.Tensor:
        n = self.size
        m = torch.zeros(n, n, dtype=torch.float64)
        m[torch.arange(n), self.perm] = 1.0
        return m

    def index(self, repeat: int = 1) -> torch.Tensor:
        """The gather index of an axis ``n * repeat`` long."""
        if repeat == 1:
            return self.perm
        return (self.perm[:, None] * repeat + torch.arange(repeat)[None, :]).reshape(-1)

    def act(self, x: torch.Tensor, axis: int, role: str = "out", repeat: int = 1) -> torch.Tensor:
        _check_role(role)
        _check_axis(x, axis, self.size * repeat)
        return x.index_select(axis, self.index(repeat).to(x.device))

    def inverse(self) -> Permutation:
        inv = torch.empty_like(self.perm)
        inv[self.perm] = torch.arange(self.size)
        return Permutation(inv)

    def then(self, second: Transform) -> Transform:
        _same_size(self, second)
        if isinstance(second, Permutation):
            return Permutation(self.perm[second.perm])
        return self.as_orthogonal(self._heads_like(second.heads)).then(second)

    def _heads_like(self, heads: int) -> int:
        """``heads`` when this permutation moves whole heads of that many, else 1 (dense)."""
        return heads if heads > 1 and split_heads(self.perm, heads) is not None else 1

    def as_orthogonal(self, heads: int = 1) -> Orthogonal:
        """The same map as an :class:`Orthogonal` with 0/1 blocks over ``heads`` heads
        (``LmcError`` unless the permutation moves whole heads)."""
        parts = split_heads(self.perm, heads) if heads > 1 else (torch.zeros(1).long(), None)
        if parts is None:
            raise LmcError(
                f"this permutation does not move whole heads of {self.size // heads} units: "
                f"it cannot be combined with a map within {heads} heads"
            )
        head, within = parts
        d = self.size // heads
        within = self.perm.reshape(1, -1) if within is None else within
        blocks = torch.eye(d, dtype=torch.float64)[within]  # block a: row i = e_{within[a, i]}
        return Orthogonal(head, blocks)

    def to_tensors(self) -> dict[str, torch.Tensor]:
        return {"perm": self.perm}


# ---- head-structured linear maps --------------------------------------------------------------
def _random_heads(heads: int, gen: torch.Generator) -> torch.Tensor:
    """A random order of ``heads`` heads (none drawn for one head)."""
    return torch.randperm(heads, generator=gen) if heads > 1 else torch.zeros(1).long()


def _draw_setup(
    n: int, seed: int | torch.Generator, heads: int, head: torch.Tensor | None
) -> tuple[torch.Generator, int, torch.Tensor]:
    """What :meth:`Transform.random` starts from: the generator of ``seed``, the head
    dimension ``d = n / heads`` (checked) and ``head`` (a random order of the heads when
    ``None``, drawn first from the generator)."""
    gen = _generator(seed)
    d = _head_dim(n, heads)
    return gen, d, _random_heads(heads, gen) if head is None else head


def _log_scales(shape: tuple[int, ...], gen: torch.Generator, spread: float) -> torch.Tensor:
    """Log-scales uniform in ``[-log spread, log spread]`` (float64)."""
    log_spread = float(torch.log(torch.tensor(float(spread), dtype=torch.float64)))
    return (torch.rand(*shape, generator=gen, dtype=torch.float64) * 2 - 1) * log_spread


def _head_dim(n: int, heads: int) -> int:
    if heads < 1 or n % heads:
        raise LmcError(f"{n} units cannot be cut into {heads} heads")
    return n // heads


def _check_axis(x: torch.Tensor, axis: int, length: int) -> None:
    if not -x.dim() <= axis < x.dim() or x.shape[axis] != length:
        raise LmcError(
            f"cannot transform axis {axis} of a tensor of shape {list(x.shape)}: it must have "
            f"{length} entries"
        )


def _same_size(first: Transform, second: Transform) -> None:
    if not isinstance(second, Transform):
        raise LmcError(f"can only compose a transform with a transform, got {type(second)}")
    if first.size != second.size:
        raise LmcError(f"cannot compose transforms of {first.size} and {second.size} units")


def haar_orthogonal(d: int, gen: torch.Generator, count: int = 1) -> torch.Tensor:
    """``count`` Haar-random ``d x d`` orthogonal matrices (float64, QR of a Gaussian with the
    signs of R's diagonal moved into Q)."""
    g = torch.randn(count, d, d, generator=gen, dtype=torch.float64)
    q, r = torch.linalg.qr(g)
    return q * torch.sign(torch.diagonal(r, dim1=-2, dim2=-1)).unsqueeze(-2)


def act_blocks(
    x: torch.Tensor,
    blocks: torch.Tensor,
    axis: int,
    repeat: int = 1,
    head: torch.Tensor | None = None,
) -> torch.Tensor:
    """``x`` with a head-structured linear map applied along ``axis`` (differentiable; no
    checks): the axis holds ``heads x d x repeat`` entries (``blocks``: (heads, d, d)), and new
    head ``a`` is ``blocks[a] @ old head head[a]`` (``head``: default the identity order)."""
    h, d = blocks.shape[0], blocks.shape[1]
    moved = x.movedim(axis, -1)
    lead = moved.shape[:-1]
    parts = moved.reshape(*lead, h, d, repeat)
    if head is not None:
        parts = parts[..., head.to(x.device), :, :]
    y = torch.einsum("hij,...hjr->...hir", blocks, parts)
    return y.reshape(*lead, h * d * repeat).movedim(-1, axis)


class _LinearMap(Transform):
    """A head-structured linear map: ``new[a] = blocks[a] @ old[head[a]]`` (see above)."""

    def __init__(self, head: torch.Tensor, blocks: torch.Tensor) -> None:
        blocks = torch.as_tensor(blocks)
        if blocks.dim() != 3 or blocks.shape[1] != blocks.shape[2] or not blocks.shape[0]:
            raise LmcError(f"blocks must have shape (heads, d, d), got {list(blocks.shape)}")
        head = _check_perm(head, "the head permutation")
        if head.numel() != blocks.shape[0]:
            raise LmcError(f"{head.numel()} head indices for {blocks.shape[0]} blocks")
        blocks = blocks.detach().to("cpu", torch.float64).clone().contiguous()
        if not torch.isfinite(blocks).all():
            raise LmcError(f"a {self.kind} transform must have finite entries")
        self._head, self._blocks = head, blocks
        self._validate()

    @abstractmethod
    def _validate(self) -> None: ...

    @classmethod
    def _random(
        cls, gen: torch.Generator, n: int, heads: int, d: int, head: torch.Tensor, **options: float
    ) -> _LinearMap:
        return cls(head, cls._random_blocks(gen, heads, d, **options))

    @classmethod
    @abstractmethod
    def _random_blocks(cls, gen: torch.Generator, heads: int, d: int) -> torch.Tensor:
        """The ``(heads, d, d)`` blocks of :meth:`random` (float64), drawn from ``gen``."""

    def _block_inverse(self) -> torch.Tensor:
        """The inverse of each block (a subclass overrides it where it has a cheaper form)."""
        return torch.linalg.inv(self._blocks)

    @property
    def head(self) -> torch.Tensor:
        return self._head

    @property
    def blocks(self) -> torch.Tensor:
        return self._blocks

    @property
    def size(self) -> int:
        return self._blocks.shape[0] * self._blocks.shape[1]

    @property
    def heads(self) -> int:
        return self._blocks.shape[0]

    def matrix(self) -> torch.Tensor:
        h, d = self.heads, self._blocks.shape[1]
        m = torch.zeros(self.size, self.size, dtype=torch.float64)
        for a in range(h):
            b = int(self._head[a])
            m[a * d : (a + 1) * d, b * d : (b + 1) * d] = self._blocks[a]
        return m

    def dual_blocks(self) -> torch.Tensor:
        """The blocks of ``M⁻ᵀ`` (same heads): how an ``in`` axis transforms."""
        return self._block_inverse().transpose(1, 2)

    def act(self, x: torch.Tensor, axis: int, role: str = "out", repeat: int = 1) -> torch.Tensor:
        _check_role(role)
        if role == "norm":
            raise LmcError(
                f"an elementwise (norm) parameter admits permutations only, not a {self.kind} "
                "map: canonicalise the transformer first (lmc.perm.canonicalize)"
            )
        _check_axis(x, axis, self.size * repeat)
        blocks = self._blocks if role == "out" else self.dual_blocks()
        y = act_blocks(x.detach().to(torch.float64), blocks.to(x.device), axis, repeat, self._head)
        return y.to(x.dtype)

    def inverse(self) -> Transform:
        inv_head = torch.empty_like(self._head)
        inv_head[self._head] = torch.arange(self.heads)
        return type(self)(inv_head, self._block_inverse()[inv_head])

    def then(self, second: Transform) -> Transform:
        _same_size(self, second)
        if isinstance(second, Permutation):
            second = second.as_orthogonal(second._heads_like(self.heads))
        first: _LinearMap = self
        if second.heads != self.heads:  # different head structures: compose as dense maps
            first, second = self.dense(), second.dense()
        head = first.head[second.head]
        blocks = second.blocks @ first.blocks[second.head]
        for planes in (type(self), type(second)):  # a rotary kind kept where the planes are
            if issubclass(planes, RopePlanes) and is_plane_structured(blocks, **planes.layout()):
                return planes(head, blocks)
        cls = Orthogonal if self.kind == second.kind == "orthogonal" else Invertible
        return cls(head, blocks)

    def dense(self) -> _LinearMap:
        """The same map with one block (``heads = 1``)."""
        return type(self)(torch.zeros(1).long(), self.matrix()[None])

    def to_tensors(self) -> dict[str, torch.Tensor]:
        return {"head": self._head, "blocks": self._blocks}

    def __repr__(self) -> str:
        return f"{type(self).__name__}(size={self.size}, heads={self.heads})"


class Orthogonal(_LinearMap):
    """An orthogonal map, dense (``heads=1``) or within heads (see the module docstring)."""

    kind: ClassVar[str] = "orthogonal"

    def _validate(self) -> None:
        d = self._blocks.shape[1]
        err = self._blocks.transpose(1, 2) @ self._blocks - torch.eye(d, dtype=torch.float64)
        if float(err.abs().max()) > ORTHOGONAL_TOL:
            raise LmcError(
                f"the blocks are not orthogonal (max |BᵀB - I| = {float(err.abs().max()):.2e}); "
                "use an Invertible transform for general maps"
            )

    def _block_inverse(self) -> torch.Tensor:
        return self._blocks.transpose(1, 2)

    def dual_blocks(self) -> torch.Tensor:
        return self._blocks

    @classmethod
    def identity(cls, n: int, heads: int = 1) -> Orthogonal:
        d = _head_dim(n, heads)
        return cls(torch.arange(heads), torch.eye(d, dtype=torch.float64).expand(heads, d, d))

    @classmethod
    def _random_blocks(cls, gen: torch.Generator, heads: int, d: int) -> torch.Tensor:
        """Haar-random blocks."""
        return haar_orthogonal(d, gen, heads)


class Invertible(_LinearMap):
    """An invertible map, dense or within heads; blocks with condition number above
    ``MAX_CONDITION`` are refused (they would lose the function to rounding)."""

    kind: ClassVar[str] = "invertible"

    def _validate(self) -> None:
        cond = torch.linalg.cond(self._blocks)
        if not torch.isfinite(cond).all() or float(cond.max()) > MAX_CONDITION:
            raise LmcError(
                f"the blocks are singular or nearly so (condition number {float(cond.max()):.2e}"
                f" > {MAX_CONDITION:.0e})"
            )

    @classmethod
    def _random_blocks(
        cls, gen: torch.Generator, heads: int, d: int, spread: float = 2.0
    ) -> torch.Tensor:
        """Blocks ``U diag(s) V`` with Haar ``U, V`` and ``log s`` uniform in
        ``[-log spread, log spread]`` (condition number at most ``spread²``)."""
        if spread < 1:
            raise LmcError(f"spread must be >= 1, got {spread}")
        u, v = haar_orthogonal(d, gen, heads), haar_orthogonal(d, gen, heads)
        log_s = _log_scales((heads, d), gen, spread)
        return u @ torch.diag_embed(log_s.exp()) @ v


PLANE_TOL = 1e-9  # max entry off the per-plane structure accepted (float64 blocks)


def _half_split_order(d: int) -> torch.Tensor:
    """The dims of an interleaved head in half-split order: ``(0, 2, 4, ..., 1, 3, 5, ...)``
    (interleaved plane ``p``, dims ``2p`` and ``2p + 1``, lands on dims ``p`` and ``p + d/2``)."""
    return torch.cat((torch.arange(0, d, 2), torch.arange(1, d, 2)))


def _interleave(blocks: torch.Tensor) -> torch.Tensor:
    """Blocks of the half-split layout re-indexed to the interleaved one (differentiable)."""
    order = torch.argsort(_half_split_order(blocks.shape[-1])).to(blocks.device)
    return blocks[..., order, :][..., order]


def _half_split(blocks: torch.Tensor) -> torch.Tensor:
    """Blocks of the interleaved layout re-indexed to the half-split one (differentiable)."""
    order = _half_split_order(blocks.shape[-1]).to(blocks.device)
    return blocks[..., order, :][..., order]


def plane_blocks(
    alpha: torch.Tensor, beta: torch.Tensor, interleaved: bool = False
) -> torch.Tensor:
    """The (heads, d, d) blocks of per-plane complex scalars ``alpha + i beta`` (each (heads,
    d/2)), in the half-split (``rotate_half``) convention: plane ``p`` is dims ``p`` and
    ``p + d/2``, mapped by ``[[alpha, -beta], [beta, alpha]]``; with ``interleaved``
    (``rotate_every_two``) plane ``p`` is dims ``2p`` and ``2p + 1`` (differentiable)."""
    a, b = torch.diag_embed(alpha), torch.diag_embed(beta)
    blocks = torch.cat((torch.cat((a, -b), dim=-1), torch.cat((b, a), dim=-1)), dim=-2)
    return _interleave(blocks) if interleaved else blocks


def plane_scalars(
    blocks: torch.Tensor, interleaved: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(alpha, beta)``, each (..., d/2): the complex scalars ``alpha + i beta`` that
    :func:`plane_blocks` (of the same layout) would map to ``blocks`` (read off their first
    columns of each plane)."""
    if interleaved:
        blocks = _half_split(blocks)
    h = blocks.shape[-1] // 2
    alpha = torch.diagonal(blocks[..., :h, :h], dim1=-2, dim2=-1)
    beta = torch.diagonal(blocks[..., h:, :h], dim1=-2, dim2=-1)
    return alpha, beta


def is_plane_structured(
    blocks: torch.Tensor, tol: float = PLANE_TOL, interleaved: bool = False
) -> bool:
    """Whether every block is :func:`plane_blocks` of some complex scalars (planes of dims
    ``p`` and ``p + d/2``; with ``interleaved``, of dims ``2p`` and ``2p + 1``)."""
    if blocks.shape[-1] % 2:
        return False
    alpha, beta = plane_scalars(blocks, interleaved)
    scale = max(1.0, float(blocks.abs().max()))
    return float((blocks - plane_blocks(alpha, beta, interleaved)).abs().max()) <= tol * scale


class RopePlanes(_LinearMap):
    """The largest within-head group that commutes with rotary position embeddings (Tran et
    al., ICML 2026): per head, per frequency plane (dims ``p`` and ``p + d/2``, Hugging Face's
    ``rotate_half`` convention), one rotation and scaling, a complex scalar ``z = s e^{iφ}``
    (:func:`plane_blocks`). On the q side (role ``out``) a plane is mapped by ``z``; on the k
    side (``in``) by ``M⁻ᵀ``, i.e. ``e^{iφ}/s``, so ``q·k`` and RoPE's rotations are kept. Heads
    may be reordered by ``head`` as every head-structured map. :class:`InterleavedRopePlanes`
    is the same group with GPT-J's planes (dims ``2p`` and ``2p + 1``)."""

    kind: ClassVar[str] = "rope"
    #: the plane layout: planes of dims ``2p`` and ``2p + 1`` (else ``p`` and ``p + d/2``)
    interleaved: ClassVar[bool] = False
    _PLANES: ClassVar[str] = "dims p and p + d/2"

    @classmethod
    def layout(cls) -> dict[str, bool]:
        """The plane layout as the keyword of :func:`plane_blocks`, :func:`plane_scalars` and
        :func:`is_plane_structured`."""
        return {"interleaved": cls.interleaved}

    def _validate(self) -> None:
        if not is_plane_structured(self._blocks, **self.layout()):
            raise LmcError(
                f"the blocks are not one rotation and scaling per frequency plane ({self._PLANES}"
                " of each head)"
            )
        alpha, beta = plane_scalars(self._blocks, **self.layout())
        modulus = (alpha.pow(2) + beta.pow(2)).sqrt()
        if float(modulus.min()) <= 0 or float(modulus.max() / modulus.min()) > MAX_CONDITION:
            raise LmcError("a plane's scaling is zero or the scalings span too wide a range")

    @classmethod
    def _random_blocks(
        cls, gen: torch.Generator, heads: int, d: int, spread: float = 2.0
    ) -> torch.Tensor:
        """Uniform angles and ``log s`` uniform in ``[-log spread, log spread]`` (``spread=1``:
        rotations only, an orthogonal map)."""
        if d % 2:
            raise LmcError(f"rotary planes need an even head dimension, got {d}")
        angle = torch.rand(heads, d // 2, generator=gen, dtype=torch.float64) * 2 * torch.pi
        log_s = _log_scales((heads, d // 2), gen, spread)
        s = log_s.exp()
        return plane_blocks(s * angle.cos(), s * angle.sin(), **cls.layout())


class InterleavedRopePlanes(RopePlanes):
    """:class:`RopePlanes` for interleaved rotary embeddings (GPT-J's and CodeGen's
    ``rotate_every_two``, Cohere's and Helium's ``rotate_half``: each plane is two neighbouring
    dims, ``2p`` and ``2p + 1``, with sin and cos repeated by ``repeat_interleave``): per head,
    per plane one rotation and scaling, kind ``rope_interleaved``. A map of one layout changes
    the function of a model of the other (its planes mix dims the other rotates apart)."""

    kind: ClassVar[str] = "rope_interleaved"
    interleaved: ClassVar[bool] = True
    _PLANES: ClassVar[str] = "dims 2p and 2p + 1"


#: The class of each rotary kind (:data:`STRUCTURED_KINDS`)
PLANE_CLASSES: dict[str, type[RopePlanes]] = {
    "rope": RopePlanes,
    "rope_interleaved": InterleavedRopePlanes,
}


def act_tiled(
    transform: Transform,
    x: torch.Tensor,
    axis: int,
    role: str = "out",
    tiles: int = 1,
    heads: int = 1,
) -> torch.Tensor:
    """``x`` with ``transform`` (``n = heads × d`` units) applied along an ``axis`` that holds
    ``heads × tiles × d`` entries: head ``a``'s ``d`` units appear ``tiles`` times in a row
    (grouped-query attention: the q rows and output-projection columns of the query heads that
    share key/value head ``a``); every copy is mapped alike."""
    if tiles == 1:
        return transform.act(x, axis, role)
    n = transform.size
    d = n // heads
    _check_axis(x, axis, n * tiles)
    moved = x.movedim(axis, -1)
    lead = moved.shape[:-1]
    parts = moved.reshape(*lead, heads, tiles, d).transpose(-3, -2).reshape(*lead, tiles, n)
    y = transform.act(parts, -1, role)
    y = y.reshape(*lead, tiles, heads, d).transpose(-3, -2).reshape(*lead, n * tiles)
    return y.movedim(-1, axis)


def compose(first: Transform, second: Transform) -> Transform:
    """``first`` followed by ``second`` (see :meth:`Transform.then`)."""
    return first.then(second)


def random_transform(
    kind: str,
    n: int,
    seed: int | torch.Generator,
    heads: int = 1,
    head: torch.Tensor | None = None,
) -> Transform:
    """A random element of ``kind`` over ``n`` units (``heads``: block structure)."""
    kind_rank(kind)
    cls = {"permutation": Permutation, "orthogonal": Orthogonal, "invertible": Invertible,
           **PLANE_CLASSES}[kind]  # fmt: skip
    return cls.random(n, seed, heads=heads, head=head)


__all__ = [
    "KINDS",
    "PLANE_CLASSES",
    "ROLES",
    "InterleavedRopePlanes",
    "Invertible",
    "Orthogonal",
    "Permutation",
    "RopePlanes",
    "act_tiled",
    "STRUCTURED_KINDS",
    "Transform",
    "compose",
    "is_plane_structured",
    "plane_blocks",
    "haar_orthogonal",
    "kind_rank",
    "random_transform",
]
