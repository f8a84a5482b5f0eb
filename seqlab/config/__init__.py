"""Configuration: frozen dataclasses validated on construction, presets as functions, `key=value` overrides.

`RunConfig` groups `model`, `data` and `train`; the whole of it is saved to a run's `config.json`, so a
model can always be rebuilt from its run folder. Every field is reachable from the command line as
`section.field=value` (for example `model.mixer=gru train.lr=3e-3`), so the CLI does not grow with the
config. A field with a fixed set of values is typed `Literal[...]`, and `__post_init__` checks every such
field against its type, so the allowed values are written once. A config never changes after validation:
a derived one is `dataclasses.replace(cfg, ...)`, validated again.

This package's public face; the code lives in `sections.py` (the three sections and their choice types),
`run_config.py` (`RunConfig` and its config.json form), `context_migration.py` (the context fields of older
runs), `presets.py` and `overrides.py` (`section.field=value` and `MIXER_RULES`).
"""

from seqlab.config.context_migration import OLD_CONTEXT_KEYS, migrate_model_dict
from seqlab.config.overrides import MIXER_RULES, MixerRule, apply_overrides, resolve_overrides
from seqlab.config.presets import PRESETS, get_preset, preset_base, preset_small, preset_tiny
from seqlab.config.run_config import RunConfig
from seqlab.config.sections import (
    ADDITIVE_POSITIONS,
    CONTEXTS,
    HYBRID_CELLS,
    MAX_THREADS,
    MIXERS,
    POSITIONS,
    RECURRENT_MIXERS,
    Context,
    DataConfig,
    DataMode,
    Device,
    HybridCell,
    Mixer,
    ModelConfig,
    Optimizer,
    Position,
    Precision,
    Schedule,
    TrainConfig,
)

__all__ = [
    "ADDITIVE_POSITIONS", "CONTEXTS", "HYBRID_CELLS", "MAX_THREADS", "MIXERS", "MIXER_RULES", "OLD_CONTEXT_KEYS",
    "POSITIONS", "PRESETS", "RECURRENT_MIXERS", "Context", "DataConfig", "DataMode", "Device", "HybridCell",
    "Mixer", "MixerRule", "ModelConfig", "Optimizer", "Position", "Precision", "RunConfig", "Schedule",
    "TrainConfig", "apply_overrides", "get_preset", "migrate_model_dict", "preset_base", "preset_small",
    "preset_tiny", "resolve_overrides",
]
