"""The command line: help works, user errors are exit code 2 with one sentence and no traceback."""

import re
import subprocess
import sys

import pytest

from seqlab.cli.main import main
from seqlab.config import RunConfig, apply_overrides, get_preset


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "seqlab", *args], capture_output=True, text=True)


def test_help_and_prepare_help() -> None:
    for args in (["--help"], ["prepare", "--help"]):
        r = _run(*args)
        assert r.returncode == 0
        assert "usage: seqlab" in r.stdout


def test_bad_option_is_exit_2_without_traceback() -> None:
    r = _run("prepare", "x", "--out", "y", "--split", "0.5,0.5")
    assert r.returncode == 2
    assert "Traceback" not in r.stderr
    assert "--split" in r.stderr


def test_overrides_are_typed_and_checked() -> None:
    cfg = apply_overrides(get_preset("tiny"), ["model.mixer=gru", "model.pos=none", "train.lr=1e-2", "model.bias=true"])
    assert cfg.model.mixer == "gru" and cfg.train.lr == 1e-2 and cfg.model.bias is True
    bads = (["model.nope=1"], ["train.lr=fast"], ["mixer=gru"], ["model.mixer=lstm"],
            ["model.pos=rope", "model.mixer=gru"])
    for bad in bads:
        with pytest.raises(ValueError):
            apply_overrides(get_preset("tiny"), bad)


def test_config_round_trips_through_json() -> None:
    import json

    cfg = apply_overrides(get_preset("small"), ["model.mixer=mingru", "model.pos=none"])
    assert RunConfig.from_dict(json.loads(cfg.to_json())) == cfg


# The subcommands of the command line contract (ARCHITECTURE.md, "Command line").
SUBCOMMANDS = {"prepare", "train", "eval", "calibrate", "complete", "phrases", "attention", "inspect", "lesson",
               "compare", "demo", "serve", "forget", "bench", "tradeoff"}


def test_main_without_command_prints_help(capsys: pytest.CaptureFixture) -> None:
    assert main([]) == 2  # no command is a usage error, as argparse's own errors are
    out, err = capsys.readouterr()
    assert out.startswith("usage: seqlab") and err == ""
    # the help lists each subcommand on its own line under COMMAND, indented by four spaces
    listed = {m.group(1) for m in re.finditer(r"^    (\w+)", out, re.MULTILINE)}
    assert listed == SUBCOMMANDS


def test_every_preset_gives_every_mixer_a_valid_config() -> None:
    """`--preset small model.mixer=gru` was a ValueError: the preset's rotary positions act inside
    attention. A recurrent mixer chosen over such a preset now gets no position input."""
    from seqlab.config import MIXERS, PRESETS, RECURRENT_MIXERS

    for preset in PRESETS:
        for mixer in MIXERS:
            cfg = apply_overrides(get_preset(preset), [f"model.mixer={mixer}"])
            assert cfg.model.mixer == mixer
            if mixer in RECURRENT_MIXERS:
                assert cfg.model.pos == "none"
            else:
                assert cfg.model.pos == get_preset(preset).model.pos
    # an explicit choice is kept, and an impossible explicit pair is still an error
    assert apply_overrides(get_preset("small"), ["model.mixer=gru", "model.pos=sinusoidal"]).model.pos == "sinusoidal"
    with pytest.raises(ValueError):
        apply_overrides(get_preset("small"), ["model.mixer=gru", "model.pos=rope"])


def test_the_options_name_the_generation_constants_they_show_in_help() -> None:
    """`seqlab --help` imports no torch, so seqlab/options names constants of the generation and evaluation
    code itself: they must be the same values."""
    from seqlab.evaluation.dynamic import METHODS
    from seqlab.evaluation.saved_chars import ASK_MODES, DEFAULT_ASK
    from seqlab.generation.complete import MAX_SENTENCE_WORDS
    from seqlab.generation.gate import DEFAULT_RULE, RULES
    from seqlab.options import fields, measuring

    assert fields.MAX_SENTENCE_WORDS == MAX_SENTENCE_WORDS and fields.RULES == RULES
    assert fields.DEFAULT_RULE == DEFAULT_RULE and fields.ASK_MODES == ASK_MODES
    assert measuring.EvalOptions.ask == DEFAULT_ASK and set(measuring.DYNAMIC_METHODS) == set(METHODS)
