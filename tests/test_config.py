"""The config contract: choice fields typed and checked once, configs frozen, the one context field (and
old RUN_DIRs' three fields migrated into it on read), and the only settings an override makes besides the
ones it names (`config.MIXER_RULES`), recorded where a person sees them."""

from __future__ import annotations

import dataclasses
import json
import typing
from pathlib import Path

import pytest

from seqlab.cli.main import main
from seqlab.config import (
    CONTEXTS,
    MIXER_RULES,
    DataConfig,
    ModelConfig,
    RunConfig,
    TrainConfig,
    apply_overrides,
    get_preset,
    migrate_model_dict,
    resolve_overrides,
)

# (cross_attention, ctx_mode, copy) as runs saved them before model.context -> the context they meant;
# these six were all the old checks allowed
OLD_CONTEXTS = {
    (False, "cross", False): "none",
    (True, "cross", False): "cross",
    (True, "cross", True): "cross+copy",
    (True, "init_state", False): "init_state",
    (True, "init_state", True): "init_state+copy",
    (True, "pointer", True): "pointer",
}
REFUSED_BEFORE = [(False, "cross", True), (False, "init_state", False), (False, "pointer", True),
                  (True, "pointer", False), (True, "both", False)]


@pytest.mark.parametrize("cls,section", [(ModelConfig, "model"), (DataConfig, "data"), (TrainConfig, "train")])
def test_every_choice_field_is_a_literal_checked_on_construction(cls: type, section: str) -> None:
    choices = {n: typing.get_args(h) for n, h in typing.get_type_hints(cls).items()
               if typing.get_origin(h) is typing.Literal}
    assert choices, cls
    for name, allowed in choices.items():
        with pytest.raises(ValueError, match=f"{section}.{name} must be .*{allowed[-1]}, not 'nope'"):
            cls(**{name: "nope"})


def test_configs_are_frozen_and_derived_by_replace() -> None:
    cfg = get_preset("tiny")
    for obj, name in ((cfg, "model"), (cfg.model, "mixer"), (cfg.data, "mode"), (cfg.train, "lr")):
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(obj, name, None)
    assert dataclasses.replace(cfg.model, vocab_size=300).vocab_size == 300
    with pytest.raises(ValueError, match="model.mixer must be"):
        dataclasses.replace(cfg.model, mixer="lstm")


@pytest.mark.parametrize("old,context", list(OLD_CONTEXTS.items()))
def test_an_old_config_json_loads_with_its_context(old: tuple[bool, str, bool], context: str) -> None:
    """A config.json written with cross_attention, ctx_mode and copy reads as model.context (recurrent
    mixer, so init_state is allowed), and writes back in the new spelling only."""
    saved = json.loads(apply_overrides(get_preset("tiny"), ["model.mixer=gru"]).to_json())
    del saved["model"]["context"]
    saved["model"].update(dict(zip(("cross_attention", "ctx_mode", "copy"), old)))
    cfg = RunConfig.from_dict(saved)
    assert cfg.model.context == context
    assert "context" in cfg.to_dict()["model"] and "copy" not in cfg.to_dict()["model"]


@pytest.mark.parametrize("old", REFUSED_BEFORE)
def test_an_old_context_that_was_refused_is_still_refused(old: tuple[bool, str, bool]) -> None:
    with pytest.raises(ValueError, match="model.c"):
        migrate_model_dict(dict(zip(("cross_attention", "ctx_mode", "copy"), old)))
    with pytest.raises(ValueError, match="cannot be given with"):
        migrate_model_dict({"context": "cross", "copy": True})


def test_the_context_choices_and_what_each_builds() -> None:
    reads = {c: (m.reads_context, m.cross_attends, m.context_init, m.copies) for c in CONTEXTS
             for m in [ModelConfig(mixer="gru", pos="none", context=c)]}  # type: ignore[arg-type]
    assert reads == {"none": (False, False, False, False), "cross": (True, True, False, False),
                     "cross+copy": (True, True, False, True), "init_state": (True, False, True, False),
                     "init_state+copy": (True, False, True, True), "pointer": (True, False, False, True)}
    with pytest.raises(ValueError, match="model.mixer=attention has none"):
        ModelConfig(context="init_state+copy")


@pytest.mark.parametrize("key", ["cross_attention", "ctx_mode", "copy"])
def test_an_old_context_override_is_refused_naming_model_context(key: str) -> None:
    with pytest.raises(ValueError, match=f"model.{key} is now part of model.context, one of none, cross"):
        apply_overrides(get_preset("tiny"), [f"model.{key}=true"])


def test_the_mixer_rules_are_the_only_settings_made_unasked() -> None:
    assert [r.field for r in MIXER_RULES] == ["pos", "n_layer"]
    cfg, notes = resolve_overrides(get_preset("tiny"), ["model.mixer=hybrid"])
    assert (cfg.model.pos, cfg.model.n_layer) == ("none", 2)
    assert [n.split(" ")[0] for n in notes] == ["model.pos=none", "model.n_layer=2"]
    assert resolve_overrides(get_preset("tiny"), ["model.mixer=gru", "model.pos=none"])[1] == []
    assert resolve_overrides(get_preset("tiny"), ["model.mixer=attention"])[1] == []  # the preset's mixer


def test_a_rule_applied_is_printed_and_kept_in_run_json(tiny_data_dir: Path, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture) -> None:
    run = tmp_path / "run"
    code = main(["train", str(tiny_data_dir), "--out", str(run), "--preset", "tiny", "--quiet", "model.mixer=gru",
                 "train.max_steps=1", "train.threads=1"])
    out = capsys.readouterr().out
    assert code == 0 and "set model.pos=none (was rope) for model.mixer=gru" in out
    info = json.loads((run / "run.json").read_text())
    assert [n.split(" ")[0] for n in info["summary"]["derived_settings"]] == ["model.pos=none"]


def _as_saved_before_context(run: Path) -> None:
    """Rewrite every config.json of RUN_DIR `run` as a run saved before model.context (the three old fields),
    with its manifest's size and sha256 to match: what an old RUN_DIR holds."""
    import hashlib

    configs = list(run.rglob("config.json"))
    assert len(configs) >= 2  # the run's own and its checkpoints'
    for config in configs:
        body = json.loads(config.read_text())
        assert body["model"].pop("context") == "cross+copy"
        body["model"].update(cross_attention=True, ctx_mode="cross", copy=True)
        data = (json.dumps(body, indent=2, sort_keys=True) + "\n").encode()
        config.write_bytes(data)
        manifest = config.parent / "manifest.json"
        if manifest.exists():
            m = json.loads(manifest.read_text())
            m["files"]["config.json"] = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
            manifest.write_text(json.dumps(m))


def test_an_old_run_dir_loads_and_resumes(tiny_data_dir: Path, tmp_path: Path) -> None:
    from seqlab.runs.load import load_run
    from seqlab.training.trainer import train

    run = tmp_path / "old"
    over = ["model.context=cross+copy", "model.ctx_block_size=32", "train.max_steps=2", "train.eval_every=2",
            "train.ckpt_every=2", "train.threads=1"]
    train(tiny_data_dir, run, apply_overrides(get_preset("tiny"), over), progress=False)
    _as_saved_before_context(run)
    model, _, cfg = load_run(run, "cpu")
    assert cfg.model.context == "cross+copy" and model.copy_head is not None
    assert train(tiny_data_dir, run, None, resume=True, overrides=["train.max_steps=3"], progress=False)["steps"] == 3
