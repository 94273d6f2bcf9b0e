"""lmc.models.compare.check_same_architecture: one check, one-line messages naming the first
difference."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from lmc.config import LmcError
from lmc.models import build
from lmc.models.compare import check_same_architecture

MLP = dict(input_size=64, width=16, depth=2)


def _error(a, b, **kwargs) -> str:
    with pytest.raises(LmcError) as info:
        check_same_architecture(a, b, **kwargs)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith("models differ: ")
    return message


def test_identical_architectures_pass():
    for a, b in (
        (build("mlp", seed=0, **MLP), build("mlp", seed=1, **MLP)),
        (build("resnet20", seed=0, width=0.25), build("resnet20", seed=1, width=0.25)),
        (build("vgg11", width=0.125, norm="batch"), build("vgg11", width=0.125, norm="batch")),
    ):
        check_same_architecture(a, b)
        check_same_architecture(a.state_dict(), b.state_dict())
        check_same_architecture(a, b.state_dict())  # mixed: the state dicts are compared


def test_spellings_of_one_architecture_pass():
    # an option at its default, given or not; an input size as a shape or a number
    check_same_architecture(build("mlp", **MLP), build("mlp", activation="relu", **MLP))
    a = build("mlp", input_size=(1, 8, 8), width=16, depth=2)
    check_same_architecture(a, build("mlp", **MLP))


def test_different_depth():
    a, b = build("mlp", **MLP), build("mlp", input_size=64, width=16, depth=3)
    message = _error(a, b)
    assert "option 'depth' is 2 in A but 3 in B" in message
    assert "'fc3.weight' is in B but not in A" in message
    message = _error(a.state_dict(), b.state_dict())
    assert message.startswith("models differ: 'fc3.weight' is in B but not in A")


def test_different_width_names_the_tensor_and_both_shapes():
    a, b = build("mlp", **MLP), build("mlp", input_size=64, width=20, depth=2)
    message = _error(a, b, purpose="alignment")
    assert message == (
        "models differ: option 'width' is 16 in A but 20 in B ('fc1.weight' has shape "
        "(16, 64) in A but (20, 64) in B); alignment needs models of one architecture"
    )
    message = _error(a.state_dict(), b.state_dict(), names=("model 0", "model 2"))
    assert message == (
        "models differ: 'fc1.weight' has shape (16, 64) in model 0 but (20, 64) in model 2; "
        "merging needs models of one architecture"
    )


def test_different_classes():
    a = build("resnet20", width=0.25, num_classes=10)
    b = build("resnet20", width=0.25, num_classes=7)
    message = _error(a, b)
    assert "option 'num_classes' is 10 in A but 7 in B" in message
    assert "has shape (10, 16) in A but (7, 16) in B" in message


def test_different_zoo_activation():
    a = build("mlp", activation="relu", **MLP)
    b = build("mlp", activation="tanh", **MLP)
    message = _error(a, b)
    assert message.startswith("models differ: option 'activation' is 'relu' in A but 'tanh' in B")
    assert "submodule 'act1' is ReLU in A but Tanh in B" in message
    # same state dicts: only the modules tell them apart
    check_same_architecture(a.state_dict(), b.state_dict())


def test_different_zoo_model():
    message = _error(build("vgg11", width=0.125), build("vgg16", width=0.125))
    assert message.startswith("models differ: the model is 'vgg11' in A but 'vgg16' in B (")


class Net(nn.Module):
    """A user's own model: no ``lmc_spec``."""

    def __init__(self, activation: type[nn.Module] = nn.ReLU, extra: bool = False) -> None:
        super().__init__()
        self.fc1 = nn.Linear(4, 8)
        self.act = activation()
        self.fc2 = nn.Linear(8, 3)
        if extra:
            self.drop = nn.Dropout(0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(x)))


def test_activation_of_a_hand_written_model_with_the_same_shapes():
    check_same_architecture(Net(), Net())
    message = _error(Net(nn.ReLU), Net(nn.Tanh))
    assert message == (
        "models differ: submodule 'act' is ReLU in A but Tanh in B; "
        "merging needs models of one architecture"
    )
    message = _error(Net(), Net(extra=True), names=("ref", "other"))
    assert "submodule 'drop' is in other but not in ref" in message
    message = _error(Net(extra=True), Net())
    assert "submodule 'drop' is in A but not in B" in message
    message = _error(Net(), nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3)))
    assert "'fc1.weight' is in A but not in B" in message


def test_a_missing_tensor():
    a = build("mlp", norm="batch", **MLP).state_dict()
    b = dict(a)
    del b["norm1.running_var"]
    message = _error(a, b)
    assert message.startswith("models differ: 'norm1.running_var' is in A but not in B;")
    message = _error(b, a)
    assert message.startswith("models differ: 'norm1.running_var' is in B but not in A;")


def test_integer_and_floating_entries_differ():
    a = build("mlp", norm="batch", **MLP).state_dict()
    b = dict(a)
    b["norm1.num_batches_tracked"] = torch.tensor(0.0)
    message = _error(a, b)
    assert "'norm1.num_batches_tracked' is torch.int64 in A but torch.float32 in B" in message
    # only floating-point-ness matters: float16 and float32 share an architecture
    c = {k: v.half() if v.is_floating_point() else v for k, v in a.items()}
    check_same_architecture(a, c)


def test_not_a_model():
    with pytest.raises(LmcError, match="nn.Module or a state dict"):
        check_same_architecture(build("mlp", **MLP), [1, 2])
