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
        # list-valued options: an empty or malformed list is refused when parsed
        ["interpolate", "A", "B", "--lambdas", ""],
        ["interpolate", "A", "B", "--lam", " , "],
        ["interpolate", "A", "B", "--lambdas", "0.5,x"],
        ["analyze", "A", "B", "--lambdas", ""],
        ["analyze", "A", "B", "--lambdas", ","],
    ],
)
def test_usage_error_is_one_line_with_a_pointer_to_help(argv, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert err.startswith(f"lmc {argv[0]}: error: ") and f"lmc {argv[0]} --help" in err


@pytest.mark.parametrize("verb", ["interpolate", "analyze"])
def test_an_empty_lambda_list_says_what_to_give(verb, capsys):
    assert main([verb, "A", "B", "--lambdas", ""]) == 2
    err = capsys.readouterr().err.strip()
    assert "--lambdas" in err and "empty" in err and "comma-separated numbers" in err


def test_parse_float_list_refuses_a_list_without_numbers():
    from lmc.cli.common import parse_float_list
    from lmc.config import LmcError

    assert parse_float_list("0.25, 0.5,", "--lambdas") == [0.25, 0.5]  # a trailing comma is fine
    for text in ("", " ", ",", " , ,"):
        with pytest.raises(LmcError, match="--lambdas is empty"):
            parse_float_list(text, "--lambdas")
