"""The shell commands the docs show, checked against the code without running them (tests/test_docs.py).

`doc_problems(name, text)` finds every command in a Markdown text, in fenced code blocks (sh-like or
untagged) and in inline code spans, and checks the ones that are seqlab's:

- `seqlab ...`, `.venv/bin/seqlab ...`, `python -m seqlab ...` and `torchrun ... -m seqlab ...` are parsed by
  the real parser of the CLI (`seqlab.cli.main.build_parser`), key=value overrides gathered as `main` gathers
  them, and then applied to the command's preset config (`apply_overrides`), so an unknown flag, a bad value
  and an unknown config field all fail. Inline spans may leave out required arguments (`seqlab serve` names
  the command in a sentence); fenced lines are whole commands.
- `python -m seqlab.X` names a module that exists; `python path/to/script.py` a file that exists.
- `make TARGET` names a target of the Makefile.

Shell syntax handled: `\\` line continuations, `# comments`, `NAME=value` environment prefixes, a `$ `
prompt, pipes and redirections (the rest of the line is not ours), and `...` for "and so on".
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import importlib.util
import io
import re
import shlex
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from unittest import mock

from seqlab.cli.main import build_parser
from seqlab.config import PRESETS, apply_overrides, get_preset

ROOT = Path(__file__).resolve().parent.parent
SHELL_FENCES = {"", "sh", "bash", "shell", "console"}
_OPERATORS = ("|", "&", ";", ">", "<", "2>")
_ENV = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_PYTHON = re.compile(r"^python(3(\.\d+)?)?$")
PLACEHOLDER = re.compile(r"^[A-Z][A-Z0-9_]*$")  # DATA_DIR, RUN, OUT, N: a value the reader fills in


@dataclass(frozen=True)
class Command:
    line: int  # 1-based line of the text where the command starts
    text: str
    whole: bool  # a fenced line (every required argument given) rather than an inline span


@dataclass(frozen=True)
class Checked:
    kind: str  # "seqlab", "module", "script", "make", or "" for a command that is not ours
    problem: str | None


def commands(text: str) -> Iterator[Command]:
    """Every candidate command of a Markdown text: fenced shell lines, then inline code spans."""
    lines = text.split("\n")
    outside = list(lines)  # the text with fenced blocks blanked, for the inline spans
    fence: str | None = None
    pending: list[str] = []
    start = 0
    for i, line in enumerate(lines):
        stripped = line.strip()
        if stripped.startswith("```"):
            fence = stripped[3:].strip().lower() if fence is None else None
            outside[i] = ""
            continue
        if fence is None:
            continue
        outside[i] = ""
        if fence not in SHELL_FENCES:
            continue
        body = stripped[2:] if fence == "console" and stripped.startswith("$ ") else stripped
        if not pending:
            start = i + 1
        if body.endswith("\\"):
            pending.append(body[:-1])
            continue
        yield Command(start, " ".join([*pending, body]), whole=True)
        pending = []
    blanked = "\n".join(outside)
    for m in re.finditer(r"(?<!`)`([^`]+)`(?!`)", blanked):
        if "\n\n" not in m.group(1):
            yield Command(blanked.count("\n", 0, m.start()) + 1, " ".join(m.group(1).split()), whole=False)


def _words(text: str) -> list[str]:
    """The words of one shell command: comments, env prefixes, '...' and everything after an operator gone."""
    words = shlex.split(text, comments=True)
    for i, w in enumerate(words):
        if w.startswith(_OPERATORS):
            words = words[:i]
            break
    while words and _ENV.match(words[0]):
        words = words[1:]
    return [w for w in words if w not in ("...", "…")]


def check(command: Command) -> Checked:
    """What kind of command it is (ours or not), and what is wrong with it, if anything."""
    try:
        words = _words(command.text)
    except ValueError as exc:  # an unclosed quote: not a command we can read, ours or not
        return Checked("", None) if "seqlab" not in command.text else Checked("seqlab", f"shlex: {exc}")
    if not words:
        return Checked("", None)
    program = Path(words[0]).name
    if words[0] == "seqlab" or words[0].endswith("/bin/seqlab"):
        if len(words) == 1 and not command.whole:  # the program's name in a sentence
            return Checked("", None)
        if len(words) > 1 and words[1].endswith(":"):  # what seqlab prints ("seqlab serve: loading ..."), not a command
            return Checked("", None)
        return Checked("seqlab", parse_seqlab(words[1:], whole=command.whole))
    if program == "make":
        return Checked("make", _check_make(words[1:]))
    if _PYTHON.match(program) or program == "torchrun":
        return _check_python(words[1:])
    return Checked("", None)


def _check_python(args: list[str]) -> Checked:
    if "-m" in args and args.index("-m") + 1 < len(args):
        module, rest = args[args.index("-m") + 1], args[args.index("-m") + 2:]
        if module == "seqlab":
            return Checked("seqlab", parse_seqlab(rest, whole=True))
        if module.startswith("seqlab."):
            found = importlib.util.find_spec(module) is not None
            return Checked("module", None if found else f"no module {module}")
        return Checked("", None)
    script = next((a for a in args if a.endswith(".py") and not a.startswith("-")), None)
    if script is None:
        return Checked("", None)
    return Checked("script", None if (ROOT / script).is_file() else f"no file {script}")


def _check_make(args: list[str]) -> str | None:
    makefile = (ROOT / "Makefile").read_text()
    targets = set(re.findall(r"^([\w.-]+)\s*:(?!=)", makefile, flags=re.M))
    missing = [a for a in args if "=" not in a and not a.startswith("-") and a not in targets]
    return f"no make target {', '.join(missing)}" if missing else None


class _ArgumentError(Exception):
    pass


def _raise(self: argparse.ArgumentParser, message: str) -> None:
    raise _ArgumentError(f"{self.prog}: {message}")


def _placeholder_aware(convert: Callable[[str], object]) -> Callable[[str], object]:
    """A `type=` that lets a placeholder (N, X, RUN_DIR) stand for a value of the type."""
    @functools.wraps(convert)
    def parse(text: str) -> object:
        return None if PLACEHOLDER.match(text) else convert(text)
    return parse


def _docs_parser(parser: argparse.ArgumentParser, *, relaxed: bool) -> argparse.ArgumentParser:
    """The real parser, taking placeholders as values; `relaxed` also makes every argument and option value
    optional, for inline spans that name a command or a flag in a sentence (`seqlab calibrate --coverage`)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                _docs_parser(sub, relaxed=relaxed)
            continue
        if action.type is not None:
            action.type = _placeholder_aware(action.type)
        if not relaxed:
            continue
        action.required = False
        takes_value = isinstance(action, (argparse._StoreAction, argparse._AppendAction))
        if action.nargs in (None, "+") and (not action.option_strings or takes_value):
            action.nargs = "?" if action.nargs is None else "*"
    for group in parser._mutually_exclusive_groups:
        group.required = group.required and not relaxed
    return parser


def parse_seqlab(argv: list[str], *, whole: bool) -> str | None:
    """The argparse or config error of `seqlab ARGV`, or None when the real parser accepts it."""
    parser = _docs_parser(build_parser(), relaxed=not whole)
    quiet = io.StringIO()
    with (mock.patch.object(argparse.ArgumentParser, "error", _raise), contextlib.redirect_stdout(quiet),
          contextlib.redirect_stderr(quiet)):
        try:
            args, extra = parser.parse_known_args(argv)
        except _ArgumentError as exc:
            return str(exc)
        except SystemExit as exc:  # --help or --version: printed and exited
            return None if exc.code == 0 else f"exit {exc.code}"
    if args.command is None:
        return "no command"
    overrides = getattr(args, "overrides", None)
    if extra and (overrides is None or any(a.startswith("-") or "=" not in a for a in extra)):
        return f"seqlab {args.command}: unrecognized arguments: {' '.join(extra)}"
    if overrides is None:
        return None
    preset = getattr(args, "preset", None) or "small"
    if preset not in PRESETS:
        return f"seqlab {args.command}: unknown preset {preset!r}"
    try:
        apply_overrides(get_preset(preset), [*overrides, *extra])
    except (ValueError, TypeError) as exc:
        return f"seqlab {args.command}: {exc}"
    return None


def doc_problems(name: str, text: str) -> tuple[list[str], dict[str, int]]:
    """`NAME:LINE: COMMAND: PROBLEM` for each bad command, and how many commands of each kind were checked."""
    problems, counts = [], {}
    for command in sorted(commands(text), key=lambda c: c.line):
        checked = check(command)
        if checked.kind:
            counts[checked.kind] = counts.get(checked.kind, 0) + 1
        if checked.problem:
            problems.append(f"{name}:{command.line}: `{command.text}`: {checked.problem}")
    return problems, counts
