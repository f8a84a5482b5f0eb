"""How an option is declared (`option`), the error that names it (`OptionError`), and the constants the
options name without importing the code that owns them (torch): `tests/test_cli_options.py` holds them equal."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from seqlab.errors import UserError

RULES = ("first-word", "expected-chars", "chars-per-wrong")  # seqlab.generation.gate.RULES
DEFAULT_RULE = "chars-per-wrong"  # seqlab.generation.gate.DEFAULT_RULE
MAX_SENTENCE_WORDS = 12  # seqlab.generation.complete.MAX_SENTENCE_WORDS
ASK_MODES = ("every-letter", "word-starts")  # seqlab.evaluation.saved_chars.ASK_MODES
ASK_HELP = ("where the simulated writer is offered suggestions: every-letter (after every typed character, as the "
            "compose page asks; default) or word-starts (at word starts only, the earlier counting)")

# How the command line reads a field's text (seqlab.cli.options maps each kind to an argparse type):
# None is plain text, "path" a Path, "int"/"float" any number, "positive_int" 1 or more, "unit" [0, 1],
# "non_negative" 0 or more, "coverages" comma-separated fractions in (0, 1], "fractions" the three comma-separated
# train,val,test fractions, "repeated" text given once per value (the flag repeats; the field holds a tuple).
KINDS = (None, "path", "int", "float", "positive_int", "unit", "non_negative", "coverages", "fractions", "repeated")


def option(default: Any, doc: str | None, *, kind: str | None = None, choices: Sequence[str] | None = None,
           flag: str | None = None, metavar: str | None = None, cli: bool = True) -> Any:
    """A dataclass field with its default and doc. `flag` names the command-line flag when it is not the field
    name with dashes (a True bool becomes `--no-<name>`); `cli=False` keeps a field for Python callers only."""
    assert kind in KINDS, kind
    return dataclasses.field(default=default, metadata={"doc": doc, "kind": kind, "choices": choices,
                                                        "flag": flag, "metavar": metavar, "cli": cli})


def cli_fields(cls: type) -> Iterator[dataclasses.Field[Any]]:
    """The fields of an options dataclass that the command line sets."""
    return (f for f in dataclasses.fields(cls) if f.metadata.get("cli", True))


def flag_of(f: dataclasses.Field[Any]) -> str:
    """The command-line flag of field `f`: its `flag`, else `--no-<name>` for a bool that defaults to True,
    else `--<name with dashes>`."""
    name = f.metadata.get("flag") or (f"no-{f.name}" if f.default is True else f.name)
    return "--" + name.replace("_", "-")


class OptionError(UserError):
    """A bad option value. `template` names the options as {0}, {1}, ...; the message reads with the field
    names, and `worded(names)` with others (the command line's flags)."""

    def __init__(self, template: str, *fields: str) -> None:
        self.template, self.fields = template, fields
        super().__init__(template.format(*fields))

    def worded(self, name: Callable[[str], str]) -> str:
        return self.template.format(*(name(f) for f in self.fields))


def require(ok: bool, template: str, *fields: str) -> None:
    """An `OptionError` unless `ok` (write the check so that nan fails it)."""
    if not ok:
        raise OptionError(template, *fields)


def lit(value: Any) -> str:
    """`value` as text to put into a template (its braces doubled)."""
    return str(value).replace("{", "{{").replace("}", "}}")


def at_least_one(options: Any, *names: str) -> None:
    """Each named count of `options` that is set is 1 or more."""
    for name in names:
        value = getattr(options, name)
        require(value is None or value >= 1, f"{{0}} must be at least 1, not {lit(value)}.", name)


def one_of(options: Any, name: str, allowed: Sequence[str]) -> None:
    value = getattr(options, name)
    require(value in allowed, f"{{0}} must be one of {', '.join(allowed)}, not {lit(repr(value))}.", name)
