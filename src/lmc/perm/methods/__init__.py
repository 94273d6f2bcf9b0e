"""Alignment methods: the registry (:mod:`.registry`), ``align`` (:mod:`.align`, the one entry
point that runs a registered method) and one module per built-in method, holding its algorithm
and its record (:class:`AlignmentMethod`: settings, what it reads, label, order, style).

A built-in method is its module here: the modules register their records when imported. The
ones below are imported in a fixed order, which is the registration order (:func:`method_names`:
what ``lmc align --help`` lists); every other module of this folder is imported after them, in
the order of its name (:func:`import_package_modules`), so a new method needs no line here. A
method's module may import another method's (``ste`` starts from weight matching; ``learned``
from ``orthogonal``). A plug-in calls :func:`register_method` from its own module.

The other modules: :mod:`.weight_matching_reference` (the whole of weight matching on one
screen, which the fast path is tested against) and :mod:`.weight_matching_files` (weight
matching of two safetensors files, read lazily).
"""

from __future__ import annotations

# the built-in methods, in registration order (each module registers its record)
# isort: off
from . import (  # noqa: F401  (imported to register them)
    identity,  # none
    canonical_control,  # canonical
    weight_matching,  # weight
    activation_matching,  # activation
    straight_through,  # ste
    random_permutation,  # random
    one_pass_matching,  # onepass
    orthogonal_weight_matching,  # orthogonal
    learned_alignment,  # learned
    orthogonal_activation_matching,  # orthogonal-activation
)

# isort: on
# this package's public names are the registry's
from . import registry
from .registry import *  # noqa: F403
from .registry import import_package_modules

import_package_modules(__name__, __path__)  # noqa: F405  (the methods not listed above)

__all__ = list(registry.__all__)
