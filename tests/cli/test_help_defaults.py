"""Every default `lmc train --help` shows is true: the TrainSettings defaults, read back."""

from __future__ import annotations

import re

import pytest

from lmc.cli.main import build_parser, main
from lmc.train import TrainSettings

DEFAULTS = TrainSettings()


def _help_entries(verb: str, capsys) -> dict[str, str]:
    """``--flag`` -> its help text (wrapped lines joined) from ``lmc VERB --help``."""
    with pytest.raises(SystemExit) as done:
        main([verb, "--help"])
    assert done.value.code == 0
    entries: dict[str, str] = {}
    current = None
    for line in capsys.readouterr().out.splitlines():
        match = re.match(r"^  (-[-\w]+)", line)
        if match:
            current = match.group(1)
            entries[current] = line.strip()
        elif current is not None and line.startswith("    "):
            entries[current] += " " + line.strip()
        else:
            current = None
    return entries


def _shown_default(entry: str) -> str:
    found = re.findall(r"\(default: ([^)]*)\)", entry)
    assert len(found) == 1, entry
    return found[0]


@pytest.mark.parametrize(
    "flag, field",
    [
        ("--warmup-epochs", "warmup_epochs"),
        ("--label-smoothing", "label_smoothing"),
        ("--epochs", "epochs"),
        ("--lr", "lr"),
        ("--momentum", "momentum"),
        ("--weight-decay", "weight_decay"),
        ("--batch-size", "batch_size"),
    ],
)
def test_numeric_defaults_shown_are_train_settings_defaults(flag, field, capsys):
    shown = _shown_default(_help_entries("train", capsys)[flag])
    assert float(shown) == getattr(DEFAULTS, field)


def test_seed_default_is_both_train_settings_seeds(capsys):
    entries = _help_entries("train", capsys)
    shown = int(_shown_default(entries["--seed"]))
    assert shown == DEFAULTS.init_seed == DEFAULTS.data_seed
    assert _shown_default(entries["--init-seed"]) == "--seed"
    assert _shown_default(entries["--data-seed"]) == "--seed"


def test_augment_flags_state_the_dataset_default_not_a_boolean(capsys):
    entries = _help_entries("train", capsys)
    assert DEFAULTS.augment is None  # the dataset decides
    for flag in ("--augment", "--no-augment"):
        assert _shown_default(entries[flag]) == "on for CIFAR, off otherwise"
        assert "True" not in entries[flag] and "False" not in entries[flag]


def test_parsed_defaults_match_the_help(capsys):
    """The parser's own defaults are the ones the help states (so the help cannot lie)."""
    args = build_parser().parse_args(["train"])
    for field in ("epochs", "batch_size", "lr", "momentum", "weight_decay", "warmup_epochs"):
        assert getattr(args, field) == getattr(DEFAULTS, field), field
    assert args.label_smoothing == DEFAULTS.label_smoothing and args.seed == DEFAULTS.init_seed
    assert args.augment is None and args.log == "none" and args.log_dir is None


@pytest.mark.parametrize("verb", ["train", "sweep"])
def test_every_option_with_a_value_default_shows_it(verb, capsys):
    """An option with a default other than None (or off for a flag) says it in --help."""
    entries = _help_entries(verb, capsys)
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a.choices, dict))
    for action in sub.choices[verb]._actions:
        if not action.option_strings or action.option_strings[0] in ("-h", "--help"):
            continue
        flag = action.option_strings[0]
        is_switch = action.nargs == 0 and action.const is True
        if action.default is None or (is_switch and action.default is False):
            continue
        assert "(default" in entries[flag], f"{verb} {flag}: {entries[flag]}"
