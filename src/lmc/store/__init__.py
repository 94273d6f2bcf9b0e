"""The run store: one folder per run named by its config hash; safetensors and JSON only."""

from .atomic import (
    atomic_path,
    jsonable,
    load_tensors,
    output_dir,
    read_json,
    save_tensors,
    write_json,
    write_text,
)
from .runs import (
    CONFIG_FILE,
    METRICS_FILE,
    MODEL_FILE,
    Run,
    RunStore,
    default_runs_dir,
    is_finished,
    load_run,
    run_name,
)

__all__ = [
    "CONFIG_FILE",
    "METRICS_FILE",
    "MODEL_FILE",
    "Run",
    "RunStore",
    "atomic_path",
    "default_runs_dir",
    "is_finished",
    "jsonable",
    "load_run",
    "load_tensors",
    "output_dir",
    "read_json",
    "run_name",
    "save_tensors",
    "write_json",
    "write_text",
]
