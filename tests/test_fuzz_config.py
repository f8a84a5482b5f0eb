"""Fuzzing `section.field=value` overrides: any list of strings gives a ValueError with a message, or a valid
config that round-trips through config.json and whose numbers the trainer can hand to torch and numpy as
they are (the seed, the optimizer's settings, the thread count)."""

from __future__ import annotations

import json
import math
import typing

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from seqlab.config import MIXERS, POSITIONS, PRESETS, RunConfig, apply_overrides, get_preset

FIELDS = {f"{section}.{name}": kind for section, cls in typing.get_type_hints(RunConfig).items()
          for name, kind in typing.get_type_hints(cls).items()}
keys = st.one_of(
    st.sampled_from(sorted(FIELDS)),
    st.sampled_from(sorted(FIELDS)).map(str.upper),
    st.sampled_from(sorted(FIELDS)).map(lambda k: f" {k} "),
    st.sampled_from(["model", "train.", ".lr", "model..mixer", "model.mixer.x", "train.lr=", "=", "", "config.x",
                     "model.__class__", "train.__dict__", "model.head_dim", "train.__post_init__"]),
    st.text(max_size=20),
)
numbers = st.one_of(st.integers(), st.integers(-(2**70), 2**70), st.floats(), st.floats(-2, 2),
                    st.sampled_from([2**31, 2**31 - 1, 2**63, 2**64, 2**64 - 1, 10**400]))
values = st.one_of(
    numbers.map(str),
    numbers.map(repr),
    st.sampled_from(["nan", "-nan", "inf", "-inf", "Infinity", "1e309", "-1e-400", "1_000", "0x10", "0b1", " 7 ",
                     "true", "False", "on", "yes", "none", "null", "", " ", "٣", "1e5", "9" * 5000, "0.0", "-0",
                     *MIXERS, *POSITIONS, "auto", "cpu", "cuda", "windows", "stream"]),
    st.text(max_size=20),
)
overrides = st.builds(lambda k, sep, v: k + sep + v, keys, st.sampled_from(["=", "=", "", "==", " = ", ":"]), values)


def check_usable(cfg: RunConfig) -> None:
    """What a valid config promises the code that consumes it without checking again."""
    assert RunConfig.from_dict(json.loads(cfg.to_json())) == cfg  # config.json holds it exactly
    t = cfg.train
    torch.Generator().manual_seed(t.seed)  # trainer: torch.manual_seed(seed)
    np.random.default_rng([t.seed, 0])  # samplers: a generator per (seed, step)
    param = torch.zeros(1, requires_grad=True)
    torch.optim.AdamW([param], lr=t.lr, betas=(t.beta1, t.beta2), weight_decay=t.weight_decay)
    assert math.isfinite(t.lr) and math.isfinite(t.weight_decay)  # an infinite step is not a schedule
    assert 0 <= t.threads < 2**31  # torch.set_num_threads takes a C int


@settings(max_examples=600, deadline=None)
@given(st.sampled_from(sorted(PRESETS)), st.lists(overrides, min_size=1, max_size=4))
def test_any_overrides_give_a_valid_config_or_a_value_error(preset: str, items: list[str]) -> None:
    try:
        cfg = apply_overrides(get_preset(preset), items)
    except ValueError as exc:
        assert str(exc).strip(), items  # a message the CLI can show as the one sentence of a user error
        return
    check_usable(cfg)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(sorted(FIELDS)), st.one_of(numbers, st.booleans()))
def test_a_value_set_is_the_value_read(key: str, value: object) -> None:
    """Setting a typed field to a value written the usual way gives exactly that value, or a ValueError."""
    text = str(value).lower() if isinstance(value, bool) else str(value)
    try:
        cfg = apply_overrides(get_preset("tiny"), [f"{key}={text}"])
    except ValueError:
        return
    section, name = key.split(".")
    got = getattr(getattr(cfg, section), name)
    if FIELDS[key] is bool:
        assert got is (text in ("1", "true"))
    elif FIELDS[key] in (int, float):
        assert got == FIELDS[key](text)
    check_usable(cfg)


@settings(max_examples=200, deadline=None)
@given(st.lists(overrides, min_size=2, max_size=4))
def test_overrides_at_once_equal_overrides_one_by_one(items: list[str]) -> None:
    base = get_preset("tiny")
    try:
        together = apply_overrides(base, items)
        one_by_one = base
        for item in items:
            one_by_one = apply_overrides(one_by_one, [item])
    except ValueError:
        return  # one at a time may pass through a combination that is invalid on its own
    assert together == one_by_one


@pytest.mark.parametrize("item", ["train.beta1=1", "train.beta2=nan", "train.beta1=-0.1", "train.lr=inf",
                                  "train.seed=18446744073709551616", "train.weight_decay=inf",
                                  "train.threads=2147483648"])
def test_values_torch_would_reject_are_value_errors(item: str) -> None:
    with pytest.raises(ValueError, match=item.split("=")[0]):
        apply_overrides(get_preset("tiny"), [item])
