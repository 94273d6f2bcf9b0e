"""Experiments: declarative studies (TOML) expanded into train -> merge jobs, run by a local or
Ray executor, reusing finished runs, and written as a tidy results table.

>>> from lmc.experiments import load_study, run_study
>>> study, text = load_study("lewc-digits-mlp")        # a packaged recipe, or a path
>>> run_study(study, "out/lewc-digits-mlp", toml_text=text)  # or RunOptions(toml_text=text)
"""

from .cells import read_csv
from .executors import LocalExecutor, RayExecutor, RunOptions, make_executor
from .jobs import Context, expand, run_job
from .results import write_results
from .runner import run_study
from .study import list_recipes, load_study, recipe_path, resolve
from .table import TABLE1_COLUMNS, table1

__all__ = [
    "TABLE1_COLUMNS",
    "Context",
    "LocalExecutor",
    "RayExecutor",
    "RunOptions",
    "expand",
    "list_recipes",
    "load_study",
    "make_executor",
    "read_csv",
    "recipe_path",
    "resolve",
    "run_job",
    "run_study",
    "table1",
    "write_results",
]
