"""The ``lmc`` command. Thin: every verb parses its options and calls the library.

Start-up is light: building the top-level parser imports no verb module (so neither torch nor
the library), and a command line imports the one verb it names (:func:`build_parser` with
``verbs``). ``lmc --help`` and ``lmc recipes`` never import torch. Building most verbs'
parsers imports torch and the part of the library the verb's options are read from (the
model registry for ``lmc train``, the alignment methods for ``lmc align``); ``lmc VERB
--help`` prints the text stored by its last call when nothing it depends on has changed
(:mod:`lmc.cli.help_cache`), so only the first call after installing or editing lmc pays
that import.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys
import warnings
from collections.abc import Iterable, Sequence

from lmc import __version__

# verb -> (module under lmc.cli, one-line help). Modules are imported only when needed.
VERBS: dict[str, tuple[str, str]] = {
    "train": ("train", "train one model into the run store"),
    "align": ("align", "align model B to model A (weight, activation, STE, orthogonal, ...)"),
    "interpolate": ("interpolate", "evaluate the linear path between two runs; barriers"),
    "curve": ("curve", "fit a Bézier curve or chain between two runs; the line beside it"),
    "merge": ("merge", "merge N runs into one (Git Re-Basin merge-many, App. A.10)"),
    "analyze": ("analyze", "layerwise analysis: LEWC, LLFC, weak additivity, orthogonality"),
    "sweep": ("sweep", "run an experiment described by a TOML file"),
    "report": ("report", "write report.md and report.html from a results folder"),
    "recipes": ("recipes", "list the packaged recipes, or show one to edit"),
    "demo": ("demo", "the width study on digits, end to end, with a report"),
    "verify": ("verify", "check stored runs against their manifests; list the damaged"),
}


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows an option's default only where it says something (not None or a False flag)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        # ``in (None, False)`` would also hide 0 and 0.0 (0 == False): compare identities
        if action.default is None or action.default is False or "(default" in (action.help or ""):
            return action.help or ""
        return super()._get_help_string(action)


class UsageError(Exception):
    """A command line argparse cannot parse (printed as one line, exit status 2)."""


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line with a pointer to ``--help``, not the
    whole usage block."""

    def error(self, message: str):  # type: ignore[override]
        raise UsageError(f"{self.prog}: error: {message} (see {self.prog} --help)")


def _verb_exists(module_name: str) -> bool:
    """Whether ``lmc.cli.<module_name>`` is there (found without importing it)."""
    return importlib.util.find_spec(f"lmc.cli.{module_name}") is not None


def build_parser(verbs: Iterable[str] | None = None) -> argparse.ArgumentParser:
    """The ``lmc`` parser. ``verbs``: the verbs whose own options are built (their modules
    imported); the others are listed with their one-line help only. Default: every verb."""
    wanted = set(VERBS) if verbs is None else set(verbs)
    parser = Parser(
        prog="lmc",
        description="Linear mode connectivity: train, align, merge, measure and explain. "
        "Path convention: theta(lam) = (1 - lam) theta_A + lam theta_B.",
    )
    parser.add_argument("--version", action="version", version=f"lmc {__version__}")
    sub = parser.add_subparsers(dest="verb", metavar="VERB")
    for verb, (module_name, help_text) in VERBS.items():
        if not _verb_exists(module_name):
            continue
        if verb not in wanted:
            sub.add_parser(verb, help=help_text, add_help=False)
            continue
        module = importlib.import_module(f"lmc.cli.{module_name}")
        help_action = getattr(module, "HELP_ACTION", None)  # a verb's own -h/--help
        verb_parser = sub.add_parser(
            verb,
            help=help_text,
            description=module.__doc__,
            formatter_class=HelpFormatter,
            add_help=help_action is None,
        )
        if help_action is not None:
            verb_parser.add_argument(
                "-h", "--help", action=help_action, help="show this help message and exit"
            )
        module.add_arguments(verb_parser)
        verb_parser.set_defaults(handler=module.run)
    return parser


def named_verb(argv: Sequence[str]) -> str | None:
    """The verb a command line names: its first word that is not an option (the top-level
    parser's only options, ``-h`` and ``--version``, take no value), or ``None``."""
    return next((word for word in argv if not word.startswith("-")), None)


#: the message prefix of the notes lmc's symmetry tracer (:mod:`lmc.perm.trace`) leaves as
#: plain ``UserWarning``s (e.g. a position-dependent map on attention heads), silenced by --quiet
TRACER_NOTE = r"lmc\.perm: "


def _clean_warnings(verb: str, quiet: bool) -> None:
    """How a verb shows warnings: lmc's own (:class:`lmc.config.LmcWarning`) as one line each,
    ``lmc VERB: warning: ...``, without file and source line, once per process; under
    ``--quiet`` the tracer's notes (:data:`TRACER_NOTE`) are not shown. Any other warning is
    shown as before. Call inside ``warnings.catch_warnings()``."""
    shown: set[str] = set()
    previous = warnings.showwarning

    def show(message, category, filename, lineno, file=None, line=None):
        from lmc.config import LmcWarning  # imported by whatever warned

        if not issubclass(category, LmcWarning):
            return previous(message, category, filename, lineno, file, line)
        text = " ".join(str(message).split())
        if text in shown:
            return None
        shown.add(text)
        try:
            print(f"lmc {verb}: warning: {text}", file=file or sys.stderr)
        except OSError:  # a closed stderr: nothing to do
            pass
        return None

    warnings.showwarning = show
    if quiet:
        warnings.filterwarnings("ignore", message=TRACER_NOTE, category=UserWarning)


HELP_FLAGS = ("-h", "--help")


def help_verb(argv: Sequence[str]) -> str | None:
    """The verb when ``argv`` is exactly ``[VERB, -h|--help]``, else ``None`` (other forms, such
    as ``lmc train --model gpt --help``, build their parser)."""
    if len(argv) == 2 and argv[0] in VERBS and argv[1] in HELP_FLAGS:
        return argv[0]
    return None


def verb_parser(verb: str) -> argparse.ArgumentParser:
    """The parser of ``lmc VERB`` (its own options built: :func:`build_parser` with ``verb``)."""
    parser = build_parser([verb])
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices[verb]


def verb_help(verb: str) -> str:
    """The text ``lmc VERB --help`` prints: the stored one (:mod:`lmc.cli.help_cache`) when
    nothing it depends on changed, else built from the verb's parser and stored."""
    from .help_cache import help_key, store_help, stored_help  # not on ``lmc --help``'s path

    key = help_key(verb)
    text = stored_help(verb, key)
    if text is None:
        text = verb_parser(verb).format_help()
        store_help(verb, key, text)
    return text


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    helped = help_verb(argv)
    if helped is not None and _verb_exists(VERBS[helped][0]):
        (sys.stdout or sys.stderr).write(verb_help(helped))  # as argparse: no stdout, stderr
        raise SystemExit(0)  # as argparse's help action does
    verb = named_verb(argv)
    parser = build_parser([verb] if verb in VERBS else [])
    try:
        args, extra = parser.parse_known_args(argv)
        if extra:  # name the verb whose options these are not
            prog = f"lmc {args.verb}" if getattr(args, "verb", None) else "lmc"
            raise UsageError(
                f"{prog}: error: unrecognized arguments: {' '.join(extra)} (see {prog} --help)"
            )
    except UsageError as exc:
        print(exc, file=sys.stderr)
        return 2
    if not getattr(args, "handler", None):
        parser.print_help()
        return 1
    try:
        with warnings.catch_warnings():  # the hooks below last as long as the verb
            _clean_warnings(args.verb, bool(getattr(args, "quiet", False)))
            return int(args.handler(args) or 0)
    except OSError as exc:  # a read-only folder, a full disk, ...: one line naming the path
        where = f" {exc.filename}" if exc.filename else ""
        print(f"lmc {args.verb}: error: cannot write or read{where}: {exc.strerror or exc}",
              file=sys.stderr)  # fmt: skip
        return 2
    except KeyboardInterrupt:
        print(f"lmc {args.verb}: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        from lmc.config import LmcError  # imported only here: it imports torch

        if not isinstance(exc, LmcError):
            raise
        print(f"lmc {args.verb}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
