"""The one builder of option flags: `add_options` reads an options dataclass of `seqlab.options` (each field's
default, doc, kind and choices) and adds its flags to a parser; `options_from` builds the dataclass back from
the parsed flags and words a bad value with the flag's name, as the command line's user wrote it."""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from seqlab.cli.arguments import coverages, non_negative_float, positive_int, split_fractions, unit_float
from seqlab.errors import UserError
from seqlab.options import OptionError, cli_fields, flag_of

T = TypeVar("T")

KIND_TYPES: dict[str | None, Callable[[str], Any] | None] = {
    None: None, "path": Path, "int": int, "float": float, "positive_int": positive_int, "unit": unit_float,
    "non_negative": non_negative_float, "coverages": coverages, "fractions": split_fractions, "repeated": None,
}


def add_options(p: argparse.ArgumentParser, cls: type, names: Sequence[str] | None = None) -> None:
    """One flag per command-line field of `cls`, in field order (or the fields `names`, in that order); the field
    name is the flag's dest. A field without a default is a positional argument."""
    chosen = list(cli_fields(cls))
    if names is not None:
        by_name = {f.name: f for f in chosen}
        chosen = [by_name[name] for name in names]
    for f in chosen:
        meta = f.metadata
        if f.default is dataclasses.MISSING:
            p.add_argument(f.name, help=meta["doc"])
        elif isinstance(f.default, bool):  # a switch: --name turns a False field on, --no-name a True one off
            p.add_argument(flag_of(f), dest=f.name, action="store_false" if f.default else "store_true",
                           help=meta["doc"])
        else:
            # the placeholder is named after the flag, not the field (--max-wrong MAX_WRONG)
            metavar = meta["metavar"] or (None if meta["choices"] else flag_of(f)[2:].replace("-", "_").upper())
            # a repeated flag appends to a list (argparse cannot append to the field's tuple)
            more = {"action": "append", "default": list(f.default)} if meta["kind"] == "repeated" else {
                "type": KIND_TYPES[meta["kind"]], "default": f.default}
            p.add_argument(flag_of(f), dest=f.name, choices=meta["choices"], metavar=metavar, help=meta["doc"],
                           **more)


def add_options_between(p: argparse.ArgumentParser, cls: type,
                        before: Mapping[str, Callable[[argparse.ArgumentParser], None]]) -> None:
    """`add_options(p, cls)` with the command's own flags in their places: `before[name](p)` adds them just
    before the field `name`, so `--help` lists the flags in the order it always has."""
    for f in cli_fields(cls):
        if f.name in before:
            before[f.name](p)
        add_options(p, cls, [f.name])


def flag_name(cls: type) -> Callable[[str], str]:
    """Field name -> its flag, for the fields of `cls`."""
    flags = {f.name: flag_of(f) for f in cli_fields(cls)}
    return lambda name: flags.get(name, name)


def options_from(cls: type[T], args: argparse.Namespace) -> T:
    """The options `cls` of the parsed flags; a bad value is a `UserError` that names the flag."""
    try:
        return cls(**{f.name: getattr(args, f.name) for f in cli_fields(cls)})
    except OptionError as exc:
        raise UserError(exc.worded(flag_name(cls))) from None
