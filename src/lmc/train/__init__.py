"""Training: a seeded, resumable loop; store-backed runs; spawning.

Seeds: ``init_seed`` fixes the initial weights, ``data_seed`` the data order and augmentation.
"""

from .evaluate import evaluate
from .loop import fit, make_optimizer
from .runs import make_config, settings_of, spawn_config, train_run
from .schedule import learning_rate
from .settings import OPTIMIZERS, PRECISIONS, SCHEDULES, TrainSettings

__all__ = [
    "OPTIMIZERS",
    "PRECISIONS",
    "SCHEDULES",
    "TrainSettings",
    "evaluate",
    "fit",
    "learning_rate",
    "make_config",
    "make_optimizer",
    "settings_of",
    "spawn_config",
    "train_run",
]
