"""The packaged recipes: studies that reproduce the papers' experiments (run with lmc sweep NAME).

`lmc recipes` lists them with their descriptions; `lmc recipes show NAME` prints one as TOML,
to copy and edit (`lmc recipes show NAME > my-study.toml`). The TOML keys are documented in
docs/studies.md.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import tomllib

import lmc

# lmc recipes imports neither torch nor the library: it reads the recipe files as TOML
# (lmc.experiments' list_recipes / recipe_path name the same files; `lmc sweep` checks them)


def _recipes_dir() -> Path:
    return Path(lmc.__file__).resolve().parent / "recipes"


def recipe_names() -> list[str]:
    """The packaged recipes' names, sorted (as :func:`lmc.experiments.list_recipes`)."""
    return sorted(p.stem for p in _recipes_dir().glob("*.toml"))


def _error(message: str) -> Exception:
    from lmc.config import LmcError  # only on this path: lmc.config imports torch

    return LmcError(message)


def _emit_json(obj: dict) -> None:
    sys.stdout.write(json.dumps(obj, sort_keys=True) + "\n")
    sys.stdout.flush()


def recipe_description(path: Path) -> str:
    """A recipe's ``description`` (the key every study file begins with)."""
    try:
        return str(tomllib.loads(path.read_text(encoding="utf-8")).get("description", ""))
    except tomllib.TOMLDecodeError as exc:
        raise _error(f"{path} is not valid TOML: {exc}") from exc


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "action", nargs="?", default="list", choices=("list", "show"), help="list (default) or show"
    )
    parser.add_argument("name", nargs="?", default=None, metavar="NAME", help="recipe to show")
    parser.add_argument("--json", action="store_true", help="print one JSON object on stdout")


def run(args: argparse.Namespace) -> int:
    names = recipe_names()
    if args.action == "show":
        if args.name is None:
            raise _error("lmc recipes show needs a NAME: one of " + ", ".join(names))
        stem = args.name.removesuffix(".toml")
        if stem not in names:
            raise _error(f"no recipe {args.name!r}: choose one of {', '.join(names)}")
        path = _recipes_dir() / f"{stem}.toml"
        text = path.read_text(encoding="utf-8")
        if args.json:
            _emit_json({"name": args.name, "path": str(path), "toml": text})
        else:
            sys.stdout.write(text)
        return 0
    described = {name: recipe_description(_recipes_dir() / f"{name}.toml") for name in names}
    if args.json:
        _emit_json({"recipes": described})
        return 0
    width = max(len(n) for n in names)
    for name, description in described.items():
        first = description.strip().splitlines()[0] if description.strip() else ""
        print(f"{name:<{width}}  {first}")
    return 0
