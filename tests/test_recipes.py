"""The one registry of named models: compare's `--models` vocabulary, the lessons' four architectures and
the demo's two models are all its recipes, and each recipe builds the model its name says."""

from __future__ import annotations

import pytest

from seqlab.config import RECURRENT_MIXERS, get_preset
from seqlab.studies.compare.plan import DEFAULT_MODELS
from seqlab.studies.demo import MODELS as DEMO_MODELS
from seqlab.studies.lessons.trained import ARCHS, ATTENTION, base_config
from seqlab.studies.recipes import RECIPES, apply_recipe, recipe

COMPARE_VOCABULARY = ("rnn", "gru", "mingru", "attn1", "attn-none", "attn-learned", "attn-sinusoidal", "attn-rope",
                      "attn-alibi", "hybrid")


def test_every_study_draws_from_the_registry() -> None:
    assert DEFAULT_MODELS == COMPARE_VOCABULARY == tuple(RECIPES)
    assert ARCHS == ("rnn", "gru", "mingru", "attn-rope") and ATTENTION in ARCHS
    # the demo's fixed models come from the registry; its other one (None) is the recipe table's choice
    assert {m[0] for m in DEMO_MODELS.values() if m is not None} <= set(RECIPES)
    assert len({r.color for r in RECIPES.values()}) == len(RECIPES)  # one colour per model in every plot
    assert len({r.label for r in RECIPES.values()}) == len(RECIPES)


@pytest.mark.parametrize("name", COMPARE_VOCABULARY)
def test_each_recipe_builds_the_model_its_name_says(name: str) -> None:
    cfg = apply_recipe(get_preset("small"), name).model
    if name in RECURRENT_MIXERS:
        assert (cfg.mixer, cfg.pos) == (name, "none")
    else:
        pos = name.partition("-")[2]
        assert cfg.mixer == "attention"
        assert (cfg.pos, cfg.n_head) == (("rope", 1) if name == "attn1" else (pos, get_preset("small").model.n_head))
    assert recipe(name).name == name


def test_recipe_overrides_come_before_the_callers() -> None:
    cfg = apply_recipe(get_preset("tiny"), "attn-rope", ["model.pos=alibi", "model.n_head=1"])
    assert (cfg.model.mixer, cfg.model.pos, cfg.model.n_head) == ("attention", "alibi", 1)
    lesson = base_config("tiny", ["model.n_head=2"], seed=7)
    assert (lesson.model.mixer, lesson.model.pos, lesson.train.seed) == ("attention", "rope", 7)
    with pytest.raises(ValueError, match="unknown model 'transformer'"):
        apply_recipe(get_preset("tiny"), "transformer")
    with pytest.raises(ValueError, match="cannot be used"):
        apply_recipe(get_preset("tiny"), "gru", ["model.pos=rope"])
