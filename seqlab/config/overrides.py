"""`section.field=value` overrides, parsed into each field's declared type, and `MIXER_RULES`, the only
fields an override of `model.mixer` sets without being asked."""

from __future__ import annotations

import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from seqlab.config.context_migration import OLD_CONTEXT_KEYS, _old_key_message
from seqlab.config.run_config import RunConfig
from seqlab.config.sections import ADDITIVE_POSITIONS, RECURRENT_MIXERS, ModelConfig


def _parse_value(text: str, annotation: Any, key: str) -> Any:
    """Turn the text of an override into the field's declared type, or raise ValueError naming the key
    (a `Literal[...]` field keeps the text: its value is checked when the config is built)."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if text.lower() in ("none", "null"):
            return None
        annotation = args[0]
    if annotation is bool:
        low = text.lower()
        if low in ("1", "true", "yes", "on"):
            return True
        if low in ("0", "false", "no", "off"):
            return False
        raise ValueError(f"{key} expects true or false, not {text!r}")
    if annotation in (int, float):
        try:
            return annotation(text)
        except ValueError:
            raise ValueError(f"{key} expects {annotation.__name__}, not {text!r}") from None
    return text


@dataclass(frozen=True)
class MixerRule:
    """A model field that follows an override of model.mixer when the overrides leave it unset."""

    field: str
    applies: Callable[[dict[str, Any]], bool]  # on the model section after the overrides
    value: Callable[[dict[str, Any]], Any]
    why: str


# The only fields an override sets without being asked, so that `--preset small model.mixer=gru` and
# `--preset tiny model.mixer=hybrid` work. Each applies when the overrides change model.mixer and do not
# set the field; set it explicitly and an impossible pair is an error as usual. The trainer records each
# rule it applied in run.json ("derived_settings") and prints it (ARCHITECTURE.md, the config contract).
MIXER_RULES = (
    MixerRule("pos", lambda m: m["mixer"] in RECURRENT_MIXERS and m["pos"] not in ADDITIVE_POSITIONS,
              lambda m: "none", "rotary and ALiBi positions act inside attention; a recurrent mixer gets no "
              "position input, as every recurrent recipe has"),
    MixerRule("n_layer", lambda m: m["mixer"] == "hybrid" and m["n_layer"] < 2,
              lambda m: max(2, len(m["hybrid_pattern"])), "a hybrid needs a recurrent and an attention layer: "
              "the pattern's length in layers, at least 2"),
)


def _apply_mixer_rules(model: dict[str, Any], before: ModelConfig, given: set[str]) -> list[str]:
    """Apply `MIXER_RULES` to the overridden model section in place; one sentence per rule applied."""
    if model["mixer"] == before.mixer:
        return []
    notes = []
    for rule in MIXER_RULES:
        if rule.field not in given and rule.applies(model):
            was, model[rule.field] = model[rule.field], rule.value(model)
            notes.append(f"model.{rule.field}={model[rule.field]} (was {was}) for model.mixer={model['mixer']}: "
                         f"{rule.why}")
    return notes


def resolve_overrides(cfg: RunConfig, overrides: list[str]) -> tuple[RunConfig, list[str]]:
    """`apply_overrides`, and the sentences of the `MIXER_RULES` it applied (empty when none did)."""
    d = cfg.to_dict()
    hints = {name: typing.get_type_hints(sub) for name, sub in typing.get_type_hints(RunConfig).items()}
    given = set()
    for item in overrides:
        key, sep, value = item.partition("=")
        section, dot, name = key.strip().partition(".")
        if not sep or not dot:
            raise ValueError(f"override {item!r} must look like section.field=value (for example model.mixer=gru)")
        if section == "model" and name in OLD_CONTEXT_KEYS:
            raise ValueError(_old_key_message(name))
        if section not in hints or name not in hints[section]:
            raise ValueError(f"unknown config field {key!r}")
        d[section][name] = _parse_value(value.strip(), hints[section][name], key)
        if section == "model":
            given.add(name)
    notes = _apply_mixer_rules(d["model"], cfg.model, given)
    return RunConfig.from_dict(d), notes


def apply_overrides(cfg: RunConfig, overrides: list[str]) -> RunConfig:
    """Return a new config with `section.field=value` overrides applied and everything re-validated.
    Changing model.mixer may also set model.pos or model.n_layer, by the rules in `MIXER_RULES` only."""
    return resolve_overrides(cfg, overrides)[0]
