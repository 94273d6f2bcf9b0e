"""Weight matching of models stored as safetensors files, without loading them (issue 32).

For models too large to hold twice (GPT-2-large-shaped: 774M parameters, 3.1 GB each in
float32), :func:`match_files` matches B's file to A's reading both lazily: every tensor is
memory-mapped from its file when weight matching first looks it up
(:class:`lmc.store.lazy.LazyStateDict`), and weight matching uses views of the tensors, not
copies (:mod:`lmc.perm.methods.weight_matching`), so memory beyond the files' pages is the
similarity matrices and one product's temporaries. :func:`permute_file` then writes the aligned B
one tensor at a time (:func:`lmc.store.lazy.write_tensors`): it never holds a second copy of the
model.

The spec may be derived without any weights, from the architecture on PyTorch's ``meta`` device
(``with torch.device("meta"): model = ...``; :func:`lmc.perm.spec_from_model` traces it), as
``benchmarks/gpt2_large_matching.py`` does. Names a file stores once for two spec names (a tied
LM head) are given as ``aliases`` (spec name -> stored name).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from lmc.config import LmcError
from lmc.store.lazy import LazyStateDict, layout_of, write_tensors

from ..symmetries.permutation_spec import PermutationSpec
from ..symmetries.permutations import check_permutation, permute_tensor
from .weight_matching import WeightMatchingResult, weight_matching


def _check_files_fit(spec: PermutationSpec, state: LazyStateDict, which: str) -> None:
    missing = [n for n in spec if n not in state]
    if missing:
        raise LmcError(
            f"{which} ({state.path}) lacks {len(missing)} tensor(s) of the spec, e.g. "
            f"{missing[0]!r} (a tied weight is named with aliases)"
        )
    for name in spec:
        shape = tuple(state[name].shape)
        if shape != spec.shapes[name]:
            raise LmcError(
                f"{which} ({state.path}): {name!r} has shape {list(shape)}, the spec expects "
                f"{list(spec.shapes[name])}: the spec was made for another architecture"
            )


def match_files(
    spec: PermutationSpec,
    path_a: str | Path,
    path_b: str | Path,
    out: str | Path | None = None,
    *,
    aliases: Mapping[str, str] | None = None,
    **options: Any,
) -> WeightMatchingResult:
    """Weight matching of the model in safetensors file ``path_b`` to the one in ``path_a``,
    both read lazily (module docstring); ``options`` are :func:`lmc.perm.weight_matching`'s
    (``seed``, ``init``, ``solver``, ``max_iter``, ``tol``, ``similarity_bytes``, ...). The
    similarity matrices kept between visits are limited to half of B's file size unless
    ``similarity_bytes`` says otherwise (``None``: no limit), so that the matching adds at
    most about half a model to the files' pages. With ``out``, B's file with the permutation
    applied is written there (:func:`permute_file`). Returns the
    :class:`lmc.perm.methods.weight_matching.WeightMatchingResult` (``.perm`` is for B)."""
    with LazyStateDict(path_a, aliases) as state_a, LazyStateDict(path_b, aliases) as state_b:
        _check_files_fit(spec, state_a, "model A")
        _check_files_fit(spec, state_b, "model B")
        options.setdefault("similarity_bytes", state_b.nbytes() // 2)
        result = weight_matching(spec, state_a, state_b, **options)
    if out is not None:
        permute_file(spec, result.perm, path_b, out, aliases=aliases)
    return result


def permute_file(
    spec: PermutationSpec,
    perm: Mapping[str, torch.Tensor],
    source: str | Path,
    out: str | Path,
    *,
    aliases: Mapping[str, str] | None = None,
) -> Path:
    """Write ``source``'s model with ``perm`` applied (new unit ``i`` of each group is old unit
    ``perm[g][i]``, as :func:`lmc.perm.apply_permutation`) to ``out``, one tensor at a time;
    tensors the spec does not name are copied as they are. The file's names, order, dtypes
    and metadata are kept. Returns ``out``."""
    check_permutation(spec, perm)
    stored_as = {v: k for k, v in (aliases or {}).items()}  # a tied tensor: its spec name
    with LazyStateDict(source, aliases) as state:
        _check_files_fit(spec, state, "the source")

        def make(name: str) -> torch.Tensor:
            spec_name = name if name in spec else stored_as.get(name, name)
            tensor = state[name]
            if spec_name not in spec:
                return tensor
            return permute_tensor(spec, perm, spec_name, tensor)

        return write_tensors(out, layout_of(state), make, state.metadata())


__all__ = ["match_files", "permute_file"]
