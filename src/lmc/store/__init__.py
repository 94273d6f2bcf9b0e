"""The run store: one folder per run named by its config hash; safetensors and JSON only."""

from .atomic import (
    atomic_path,
    jsonable,
    load_tensors,
    output_dir,
    read_json,
    save_tensors,
    tensors_from_bytes,
    write_bytes,
    write_json,
    write_text,
)
from .manifest import MANIFEST_FILE, DamagedRunError, read_manifest
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
from .verify import STATUSES, RunCheck, run_folders, verify_run

__all__ = [
    "CONFIG_FILE",
    "DamagedRunError",
    "MANIFEST_FILE",
    "METRICS_FILE",
    "MODEL_FILE",
    "Run",
    "RunCheck",
    "RunStore",
    "STATUSES",
    "atomic_path",
    "default_runs_dir",
    "is_finished",
    "jsonable",
    "load_run",
    "load_tensors",
    "output_dir",
    "read_json",
    "read_manifest",
    "run_folders",
    "run_name",
    "save_tensors",
    "tensors_from_bytes",
    "verify_run",
    "write_bytes",
    "write_json",
    "write_text",
]
