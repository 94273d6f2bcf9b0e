"""What a result records about the machine that made it."""

import torch

from lmc.config import environment_info
from lmc.config.environment import cpu_model


def test_the_cpu_and_its_kernels_are_recorded():
    info = environment_info("cpu")
    assert info["cpu"] == cpu_model()
    assert info["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert info["device"] == "cpu" and info["torch_threads"] == torch.get_num_threads()


def test_the_cpu_model_comes_from_cpuinfo(tmp_path, monkeypatch):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nvendor_id\t: X\nmodel name\t: Example CPU 9000\n")
    real_open = open

    def fake_open(path, *args, **kwargs):
        return real_open(cpuinfo if path == "/proc/cpuinfo" else path, *args, **kwargs)

    monkeypatch.setattr("builtins.open", fake_open)
    assert cpu_model() == "Example CPU 9000"
