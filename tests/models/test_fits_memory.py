"""A model too large for the machine is refused from its parameter count, before anything is
allocated (counted on the meta device)."""

import pytest

from lmc.config import LmcError
from lmc.models import build, check_fits_memory, parameter_count, resolve_options
from lmc.models.registry import TRAINING_BYTES_PER_PARAMETER


@pytest.mark.parametrize(
    "name, options",
    [
        ("mlp", {"width": 16, "input_size": 64, "num_classes": 10, "depth": 2}),
        ("vgg11", {"width": 0.125, "in_channels": 3, "num_classes": 10}),
        ("resnet20", {"width": 0.25, "in_channels": 1, "num_classes": 10}),
    ],
)
def test_the_meta_count_equals_the_built_models(name, options):
    options = resolve_options(name, options)
    built = sum(p.numel() for p in build(name, **options).parameters())
    assert parameter_count(name, options) == built


def test_the_limit_is_the_memory_given():
    options = resolve_options("mlp", {"width": 32, "input_size": 64, "num_classes": 10})
    count = parameter_count("mlp", options)
    need = count * TRAINING_BYTES_PER_PARAMETER
    assert check_fits_memory("mlp", options, memory=need) == count
    with pytest.raises(LmcError, match=f"{count:,} parameters.*choose a smaller width"):
        check_fits_memory("mlp", options, memory=need - 1)


def test_a_huge_width_is_refused_without_allocating():
    options = resolve_options("mlp", {"width": 10**7, "input_size": 784, "num_classes": 10})
    with pytest.raises(LmcError, match="TiB"):
        check_fits_memory("mlp", options, memory=2**34)
