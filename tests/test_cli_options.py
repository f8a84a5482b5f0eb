"""Each option of the commands that use a trained RUN_DIR is declared once, as a field of a `seqlab.options`
dataclass: every flag of those commands is a field (or one of the few that only say how to print), every
field a flag, the defaults the flags give are the fields' defaults, `Run`'s keyword arguments are the fields
with the same defaults, and a bad value is worded as its reader wrote it (flag or field)."""

from __future__ import annotations

import argparse
import dataclasses
import inspect

import pytest

from seqlab.api.data import prepare
from seqlab.api.runs import Run
from seqlab.cli.main import build_parser, main
from seqlab.data.prepare.options import PrepareConfig
from seqlab.errors import UserError
from seqlab.options import (
    CalibrateOptions,
    CompleteOptions,
    EvalOptions,
    OptionError,
    PhrasesOptions,
    TradeoffOptions,
    flag_of,
)

# command -> (its options, the flags that only say where or how to print, the Run method it calls)
COMMANDS = {
    "eval": (EvalOptions, {"--json", "--plot", "--device"}, Run.evaluate),
    "calibrate": (CalibrateOptions, {"--device"}, Run.calibrate),
    "complete": (CompleteOptions, {"--show-confidence", "--device"}, Run.complete),
    "tradeoff": (TradeoffOptions, {"--out", "--device"}, Run.tradeoff),
    "phrases": (PhrasesOptions, set(), Run.fit_phrases),
}
PYTHON_ONLY = {"completions"}  # EvalOptions: the studies measure the held-out pass alone


def _parser(command: str) -> argparse.ArgumentParser:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices[command]


def _flags(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {a.option_strings[-1]: a for a in parser._actions if a.option_strings and a.dest != "help"}


@pytest.mark.parametrize("command", list(COMMANDS))
def test_every_flag_is_a_field_and_every_field_a_flag(command: str) -> None:
    cls, printing, _ = COMMANDS[command]
    flags = _flags(_parser(command))
    fields = {flag_of(f): f for f in dataclasses.fields(cls) if f.name not in PYTHON_ONLY}
    assert set(flags) - printing == set(fields)
    for flag, f in fields.items():
        assert flags[flag].dest == f.name, flag
        assert flags[flag].default == f.default, flag  # a --no-<name> switch stores False, its default True
        assert f.metadata["doc"] == flags[flag].help, flag


@pytest.mark.parametrize("command", list(COMMANDS))
def test_runs_keywords_are_the_fields_with_their_defaults(command: str) -> None:
    cls, _, method = COMMANDS[command]
    params = {n: p for n, p in inspect.signature(method).parameters.items()
              if p.default is not inspect.Parameter.empty}
    assert set(params) == {f.name for f in dataclasses.fields(cls)}
    for f in dataclasses.fields(cls):
        assert params[f.name].default == f.default, f.name


def test_the_tradeoff_command_and_method_measure_the_same_split_by_default() -> None:
    args = build_parser().parse_args(["tradeoff", "RUN", "--out", "OUT"])
    assert args.split == inspect.signature(Run.tradeoff).parameters["split"].default == "val"


def test_a_bad_value_names_the_field_for_python_and_the_flag_for_the_command_line(
        capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(OptionError, match=r"^temperature must be 0 or more"):
        CompleteOptions(temperature=-1.0)
    with pytest.raises(UserError, match=r"^min_context 9 is longer than max_context 8\.$"):
        PhrasesOptions(min_context=9)
    with pytest.raises(UserError, match=r"^max_wrong_per_100 must be 0 or more"):
        EvalOptions(max_wrong_per_100=-1.0)
    with pytest.raises(UserError, match=r"^mid_word \(k letters"):
        TradeoffOptions(mid_word=1)
    # the command line refuses before it loads anything, in its own words: one line, exit 2
    for argv, message in ((["complete", "RUN", "hi", "--temperature", "-1"], "--temperature must be 0 or more"),
                          (["phrases", "RUN", "--min-context", "9"], "--min-context 9 is longer than --max-context 8"),
                          (["tradeoff", "RUN", "--out", "OUT", "--mid-word", "1"], "--mid-word (k letters"),
                          (["calibrate", "RUN", "--coverage", "2"], "--coverage must be in (0, 1]")):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.startswith(f"seqlab: error: {message}") and err.count("\n") == 1, err
        assert "Traceback" not in err


# `seqlab prepare`: the flags of what a DATA_DIR holds are PrepareConfig's fields; these only say where and how the
# work is done (never what is written), so they stay outside it, as its docstring says
PREPARE_WORK_FLAGS = {"--out", "--update", "--cache-dir", "--workers", "--quiet", "--password-command", "--oauth2",
                      "--ca-file", "--insecure"}
PREPARE_WORK_KEYWORDS = {"out", "update", "cache_dir", "workers", "progress", "password_command", "oauth2",
                         "ca_file", "insecure"}


def test_every_prepare_flag_is_a_config_field_and_every_field_a_flag() -> None:
    parser = _parser("prepare")
    flags = _flags(parser)
    fields = {flag_of(f): f for f in dataclasses.fields(PrepareConfig) if f.init and f.name != "source"}
    assert set(flags) - PREPARE_WORK_FLAGS == set(fields)
    for flag, f in fields.items():
        assert flags[flag].dest == f.name, flag
        default = flags[flag].default
        assert (tuple(default) if isinstance(default, list) else default) == f.default, flag
        assert f.metadata["doc"] == flags[flag].help, flag
    positional = [a for a in parser._actions if not a.option_strings]
    assert [a.dest for a in positional] == ["source"]
    source = next(f for f in dataclasses.fields(PrepareConfig) if f.name == "source")
    assert positional[0].help == source.metadata["doc"]
    # a repeated flag collects its values; the comma-separated ones are read as one text
    args = build_parser().parse_args(["prepare", "mail", "--out", "d", "--sender", "a@b.example", "--sender",
                                      "c@d.example", "--split", "0.8,0.1,0.1"])
    assert args.senders == ["a@b.example", "c@d.example"] and args.split == (0.8, 0.1, 0.1)


def test_prepares_keywords_are_the_config_fields_with_their_defaults() -> None:
    params = {n: p for n, p in inspect.signature(prepare).parameters.items()
              if p.kind is inspect.Parameter.KEYWORD_ONLY}
    fields = {f.name: f for f in dataclasses.fields(PrepareConfig) if f.init and f.name != "source"}
    assert set(params) - PREPARE_WORK_KEYWORDS == set(fields)
    for name, f in fields.items():
        assert params[name].default == f.default, name
