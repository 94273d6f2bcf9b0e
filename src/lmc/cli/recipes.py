"""The packaged recipes: studies that reproduce the papers' experiments (run with lmc sweep NAME).

`lmc recipes` lists them with their descriptions; `lmc recipes show NAME` prints one as TOML,
to copy and edit (`lmc recipes show NAME > my-study.toml`). The TOML keys are documented in
docs/studies.md.
"""

from __future__ import annotations

import argparse
import sys

from lmc.config import LmcError

from .common import emit_json


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "action", nargs="?", default="list", choices=("list", "show"), help="list (default) or show"
    )
    parser.add_argument("name", nargs="?", default=None, metavar="NAME", help="recipe to show")
    parser.add_argument("--json", action="store_true", help="print one JSON object on stdout")


def run(args: argparse.Namespace) -> int:
    from lmc.experiments import list_recipes, load_study, recipe_path

    names = list_recipes()
    if args.action == "show":
        if args.name is None:
            raise LmcError("lmc recipes show needs a NAME: one of " + ", ".join(names))
        path = recipe_path(args.name)
        if path is None:
            raise LmcError(f"no recipe {args.name!r}: choose one of {', '.join(names)}")
        text = path.read_text(encoding="utf-8")
        if args.json:
            emit_json({"name": args.name, "path": str(path), "toml": text})
        else:
            sys.stdout.write(text)
        return 0
    described = {name: load_study(name)[0]["description"] for name in names}
    if args.json:
        emit_json({"recipes": described})
        return 0
    width = max(len(n) for n in names)
    for name, description in described.items():
        first = description.strip().splitlines()[0] if description.strip() else ""
        print(f"{name:<{width}}  {first}")
    return 0
