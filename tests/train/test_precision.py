"""The ``precision`` training setting: fp32, bf16 autocast or auto (bf16 only where the
hardware has it, :mod:`lmc.config.precision`), the resolved value part of the run's identity.

The hardware is simulated: ``LMC_CPU_CAPABILITY`` reports the CPU's capability and bfloat16
flags, and :func:`lmc.config.precision.measure_speedup` (the start-up timing) is replaced by a
given t_fp32 / t_bf16, so each test sees the CPU it names whatever machine runs it.
"""

import warnings
from pathlib import Path

import pytest
import torch

from lmc.cli.main import main
from lmc.config import LmcError, LmcWarning, config_hash
from lmc.config import precision as precision_module
from lmc.config.precision import bf16_support, cache_file, resolve_precision
from lmc.experiments import LocalExecutor, resolve, run_study
from lmc.models import build
from lmc.store import RunStore, read_json
from lmc.train import PRECISIONS, TrainSettings, fit, make_config, settings_of, train_run

ROOT = Path(__file__).resolve().parents[2]
#: t_fp32 / t_bf16 of the simulated emulation: bf16 250 times slower (an AVX2-only CPU)
EMULATED_SPEEDUP = 1 / 250


class Hardware:
    """A simulated CPU: its capability (``LMC_CPU_CAPABILITY``) and the speedup the start-up
    timing measures; ``timings`` counts the timings taken."""

    def __init__(self, monkeypatch, tmp_path, capability: str, speedup: float) -> None:
        self.speedup, self.timings = speedup, 0
        monkeypatch.setenv("LMC_CPU_CAPABILITY", capability)
        monkeypatch.setenv("LMC_PRECISION_CACHE", str(tmp_path / "cache" / "precision.json"))
        monkeypatch.delenv("LMC_AUTO_PRECISION", raising=False)
        monkeypatch.setattr(precision_module, "measure_speedup", self._measure)
        precision_module.clear_cache()

    def _measure(self, device="cpu") -> float:
        self.timings += 1
        return self.speedup

    def set_speedup(self, speedup: float) -> None:
        """A new timing (the process and disk caches forgotten)."""
        self.speedup = speedup
        precision_module.clear_cache()
        cache_file().unlink(missing_ok=True)


@pytest.fixture(autouse=True)
def _own_cache(monkeypatch, tmp_path):
    """Timings of the real CPU (the tests that simulate none) are kept in the test's folder."""
    monkeypatch.setenv("LMC_PRECISION_CACHE", str(tmp_path / "cache" / "precision.json"))


@pytest.fixture
def emulated(monkeypatch, tmp_path):
    """An AVX2-only CPU: no bfloat16 flags, bf16 250 times slower than fp32."""
    yield Hardware(monkeypatch, tmp_path, "AVX2", EMULATED_SPEEDUP)
    precision_module.clear_cache()


@pytest.fixture
def native(monkeypatch, tmp_path):
    """A CPU with AMX: bfloat16 native, bf16 twice as fast as fp32 (``set_speedup`` changes
    it)."""
    yield Hardware(monkeypatch, tmp_path, "AVX512 amx_bf16", 2.0)
    precision_module.clear_cache()


def _bf16_warnings(caught) -> list[str]:
    return [
        str(w.message)
        for w in caught
        if issubclass(w.category, LmcWarning) and "precision bf16" in str(w.message)
    ]


def _model(seed: int = 0) -> torch.nn.Module:
    return build("mlp", input_size=64, width=32, depth=2, seed=seed)


def _bf16_settings(**overrides) -> TrainSettings:
    return TrainSettings(**{"epochs": 3, "lr": 0.1, "precision": "bf16", **overrides})


def test_precision_defaults_to_auto_and_is_validated():
    assert TrainSettings().precision == "auto"
    assert PRECISIONS == ("auto", "fp32", "bf16")
    with pytest.raises(LmcError, match=r"precision 'fp16'.*auto, fp32, bf16"):
        TrainSettings(precision="fp16")


def test_precision_is_part_of_the_run_identity(emulated):
    options = {"width": 32, "depth": 2}
    fp32 = make_config("digits", "mlp", options, epochs=2, precision="fp32")
    with pytest.warns(LmcWarning, match="250x slower"):  # the simulated AVX2 CPU
        bf16 = make_config("digits", "mlp", options, epochs=2, precision="bf16")
    assert fp32["train"]["precision"] == "fp32"
    assert bf16["train"]["precision"] == "bf16"
    assert config_hash(fp32) != config_hash(bf16)
    assert config_hash(fp32) == config_hash(make_config("digits", "mlp", options, epochs=2))
    assert settings_of(bf16).precision == "bf16"
    with pytest.raises(LmcError, match="precision 'int8'"):
        make_config("digits", "mlp", options, precision="int8")


def test_bf16_training_keeps_float32_weights_and_learns(digits):
    model = _model()
    history = fit(model, digits, _bf16_settings())
    assert {p.dtype for p in model.parameters()} == {torch.float32}
    assert all(p.grad is None or p.grad.dtype == torch.float32 for p in model.parameters())
    assert history[-1]["train_loss"] < history[0]["train_loss"]
    assert history[-1]["test_accuracy"] > 0.85
    # the model is left without autocast: its plain forward pass is float32
    assert model(digits.x_test[:4]).dtype == torch.float32


def test_bf16_changes_the_weights_but_is_deterministic_on_cpu(digits):
    def weights(precision: str) -> dict[str, torch.Tensor]:
        model = _model()
        fit(model, digits, _bf16_settings(epochs=2, precision=precision))
        return model.state_dict()

    first, second, fp32 = weights("bf16"), weights("bf16"), weights("fp32")
    assert all(torch.equal(first[k], second[k]) for k in first)
    assert any(not torch.equal(first[k], fp32[k]) for k in first)


def test_bf16_run_trains_into_the_store(tmp_path, digits):
    config = make_config(
        "digits", "mlp", {"width": 32, "depth": 2}, epochs=2, lr=0.1, precision="bf16"
    )
    run, reused = train_run(config, store=RunStore(tmp_path), data=digits)
    assert not reused
    assert run.config["train"]["precision"] == "bf16"
    assert all(t.dtype == torch.float32 for t in run.state_dict().values())


# --------------------------------------------------------------------------- auto and warnings


def test_auto_on_a_cpu_without_native_bf16_trains_fp32_as_the_fp32_run(emulated, tmp_path, digits):
    options = {"width": 16, "depth": 2}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        auto = make_config("digits", "mlp", options, epochs=1, precision="auto")
        default = make_config("digits", "mlp", options, epochs=1)
        fp32 = make_config("digits", "mlp", options, epochs=1, precision="fp32")
        run, reused = train_run(default, store=RunStore(tmp_path / "runs"), data=digits)
    assert auto["train"]["precision"] == default["train"]["precision"] == "fp32"
    assert config_hash(auto) == config_hash(default) == config_hash(fp32)
    assert not reused and run.path.name.endswith(config_hash(fp32))
    assert read_json(run.path / "config.json")["train"]["precision"] == "fp32"
    assert _bf16_warnings(caught) == []  # auto is silent, and took no timing without the flags
    assert emulated.timings == 0


def test_a_bf16_request_on_an_emulating_cpu_warns_once_before_training(
    emulated, monkeypatch, tmp_path, capsys
):
    """Through ``lmc train``: the warning names the CPU, the measured slowdown and the fp32
    alternative as another run, and is printed once, as one line, before the first training
    step (the CLI shows lmc's warnings as ``lmc VERB: warning: ...``)."""
    import lmc.train.runs as runs_module

    real_fit, err_at_fit = runs_module.fit, []

    def spy(*args, **kwargs):
        err_at_fit.append(capsys.readouterr().err)
        return real_fit(*args, **kwargs)

    monkeypatch.setattr(runs_module, "fit", spy)
    argv = ["train", "--dataset", "digits", "--model", "mlp", "--width", "8", "--depth", "2",
            "--epochs", "1", "--precision", "bf16", "--device", "cpu", "--quiet",
            "--runs-dir", str(tmp_path / "runs")]  # fmt: skip
    assert main(argv) == 0
    after = capsys.readouterr().err
    (before,) = err_at_fit
    lines = [line for line in before.splitlines() if "precision bf16" in line]
    assert len(lines) == 1 and lines[0].startswith("lmc train: warning: ")  # once, before fit
    assert "precision bf16" not in after
    message = lines[0]
    assert "AVX2" in message and "emulated" in message
    assert "250x slower" in message
    assert "--precision fp32" in message and "different run" in message
    assert emulated.timings == 1
    (run_dir,) = (tmp_path / "runs").iterdir()
    assert read_json(run_dir / "config.json")["train"]["precision"] == "bf16"


def test_auto_on_a_native_cpu_picks_bf16_only_where_measured_faster(native):
    options = {"width": 16, "depth": 2}
    assert resolve_precision("auto", "cpu") == "bf16"
    config = make_config("digits", "mlp", options, epochs=1)
    assert config["train"]["precision"] == "bf16"
    assert config_hash(config) == config_hash(
        make_config("digits", "mlp", options, epochs=1, precision="bf16")
    )
    native.set_speedup(1.05)  # native, but not faster by the margin: fp32
    assert resolve_precision("auto", "cpu") == "fp32"
    assert make_config("digits", "mlp", options, epochs=1)["train"]["precision"] == "fp32"
    native.set_speedup(0.5)  # native, but slower: auto is fp32, and bf16 warns with the factor
    assert resolve_precision("auto", "cpu") == "fp32"
    with pytest.warns(LmcWarning, match=r"native.*2\.0x slower"):
        assert resolve_precision("bf16", "cpu") == "bf16"


def test_no_warning_where_bf16_is_native_and_faster(native, digits):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fit(_model(), digits, _bf16_settings(epochs=1))
    assert _bf16_warnings(caught) == []
    assert native.timings == 1


def test_fit_resolves_auto_for_its_device(emulated, digits):
    """``fit`` with ``auto`` from Python (no config): on the emulating CPU, the explicit fp32
    run's weights."""

    def weights(precision: str) -> dict:
        model = _model()
        fit(model, digits, _bf16_settings(epochs=1, precision=precision))
        return model.state_dict()

    auto, fp32 = weights("auto"), weights("fp32")
    assert all(torch.equal(auto[k], fp32[k]) for k in fp32)


def test_the_measurement_is_cached_in_the_process_and_on_disk(native):
    assert bf16_support("cpu").speedup == 2.0 and native.timings == 1
    bf16_support("cpu")
    assert native.timings == 1  # the process's answer
    precision_module.clear_cache()
    assert bf16_support("cpu").speedup == 2.0 and native.timings == 1  # the file's answer
    (entry,) = read_json(cache_file()).items()
    assert torch.__version__ in entry[0] and "amx_bf16" in entry[0]
    assert entry[1] == {"speedup": 2.0, "native": True}
    native.set_speedup(3.0)  # the file deleted: measured again
    assert bf16_support("cpu").speedup == 3.0 and native.timings == 2


def test_the_capability_is_reported_and_injectable(native, monkeypatch):
    support = bf16_support("cpu", speedup=0.1)
    assert support.native and support.flags == ("amx_bf16",) and support.capability == "AVX512"
    assert support.auto == "fp32" and support.slow
    assert native.timings == 0  # an injected timing measures nothing
    monkeypatch.setenv("LMC_CPU_CAPABILITY", "AVX2")
    emulated = bf16_support("cpu", measure=False)
    assert not emulated.native and emulated.capability == "AVX2" and emulated.flags == ()
    assert "AVX2; bfloat16 emulated" in emulated.describe()


def test_auto_precision_can_be_pinned_by_the_environment(native, monkeypatch):
    monkeypatch.setenv("LMC_AUTO_PRECISION", "fp32")
    assert resolve_precision("auto", "cpu") == "fp32" and native.timings == 0
    monkeypatch.setenv("LMC_AUTO_PRECISION", "fp16")
    with pytest.raises(LmcError, match="LMC_AUTO_PRECISION='fp16'"):
        resolve_precision("auto", "cpu")


def test_a_study_without_a_precision_trains_the_resolved_one(emulated, tmp_path, tiny_study):
    """A study's ``[train]`` without ``precision`` (auto) trains in fp32 on the simulated AVX2
    CPU: the runs (folders) of ``precision = "fp32"``."""
    tiny = tiny_study(model={"depth": 2}, analysis={"enabled": None, "max_examples": 64})
    runs = tmp_path / "runs"

    def run(study: dict, out: str) -> dict:
        return run_study(
            resolve(study), tmp_path / out, executor=LocalExecutor(1), runs_dir=runs, quiet=True
        )

    first = run(tiny, "auto")
    assert first["jobs"] == {"total": 3, "reused": 0, "run": 3}
    configs = [read_json(p / "config.json") for p in runs.iterdir() if p.is_dir()]
    assert len(configs) == 2 and {c["train"]["precision"] for c in configs} == {"fp32"}
    pinned = run({**tiny, "train": {"epochs": 1, "precision": "fp32"}}, "fp32")
    assert pinned["jobs"] == {"total": 3, "reused": 2, "run": 1}  # the two runs reused


def test_the_throughput_benchmark_names_the_cpu_it_ran_on(emulated, run_benchmark):
    args = ["--model", "gpt", "--widths", "8", "--steps", "2",
            "--repeats", "1", "--context", "8", "--batch-size", "4", "--vocab", "11"]  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", LmcWarning)
        first = run_benchmark("train_throughput", *args).splitlines()[0]
    assert "on CPU " in first and "(AVX2; bfloat16 emulated" in first
