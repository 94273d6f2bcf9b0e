"""Command lines argparse cannot parse are one line on stderr and exit status 2."""

import pytest

from lmc.cli.main import main


@pytest.mark.parametrize(
    "argv",
    [
        ["interpolate"],
        ["train", "--epochs", "two"],
        ["analyze", "A", "B", "--align", "bogus"],
        ["sweep", "study.toml", "--no-such-flag"],
    ],
)
def test_usage_error_is_one_line_with_a_pointer_to_help(argv, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert err.startswith(f"lmc {argv[0]}: error: ") and f"lmc {argv[0]} --help" in err
