"""seqlab: train, compare and inspect next-token language models on email.

The public API (docs/api.md) is re-exported here lazily (PEP 562): `import seqlab` imports nothing heavy, and
`seqlab.prepare` (the data side) never imports torch; a name is imported from its module on first use.

    data = seqlab.prepare("synthetic", "out/data", count=200)
    run = seqlab.train(data, "out/run", preset="tiny", train={"max_steps": 60})
    print(run.complete("Hi Dana, could you send me the").text)
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from seqlab.version import __version__

# seqlab leaves the OpenMP wait policy to libgomp. OMP_WAIT_POLICY=PASSIVE (idle threads sleep) helps
# attention beside a busy process but slows GRU training on a quiet machine, whose many small per-step
# parallel regions then pay a wake-up each: a user who shares the machine can set it (the figures are in
# the experiments index; `seqlab bench --only threads` measures the default).

# public name -> the module that defines it; tests/test_api.py holds each name's signature as the contract
_EXPORTS: dict[str, str] = {
    "prepare": "seqlab.api.data", "DataDir": "seqlab.api.data", "thunderbird": "seqlab.api.data",
    "train": "seqlab.api.training", "StepReport": "seqlab.training.progress",
    "load": "seqlab.api.runs", "Run": "seqlab.api.runs",
    "Completion": "seqlab.generation.complete",
    "Score": "seqlab.api.views", "NextToken": "seqlab.api.views", "Attention": "seqlab.api.views",
    "Inspection": "seqlab.api.views",
    "lesson": "seqlab.api.lessons", "lesson_names": "seqlab.api.lessons", "softmax": "seqlab.api.lessons",
    "soft_lookup": "seqlab.api.lessons", "attention_weights": "seqlab.api.lessons",
    "self_attention_layer": "seqlab.api.lessons", "state_numbers": "seqlab.api.lessons",
    "LessonResult": "seqlab.studies.lessons.common", "LookupMath": "seqlab.inspection.probes",
    "preset": "seqlab.api.presets", "RunConfig": "seqlab.config", "ModelConfig": "seqlab.config",
    "DataConfig": "seqlab.config", "TrainConfig": "seqlab.config",
    "build_model": "seqlab.models", "LM": "seqlab.models", "LMState": "seqlab.models",
    "lm_loss": "seqlab.evaluation.heldout",
    "UserError": "seqlab.errors",
}

# the same names as _EXPORTS, spelled out for tools that read __all__ statically (tests/test_api.py compares them)
__all__ = [
    "__version__",
    "prepare", "DataDir", "thunderbird", "train", "StepReport", "load", "Run", "Completion", "Score", "NextToken",
    "Attention", "Inspection", "lesson", "lesson_names", "softmax", "soft_lookup", "attention_weights",
    "self_attention_layer", "state_numbers", "LessonResult", "LookupMath", "preset", "RunConfig", "ModelConfig",
    "DataConfig", "TrainConfig", "build_model", "LM", "LMState", "lm_loss", "UserError",
]

if TYPE_CHECKING:  # for type checkers and editors only; at run time `__getattr__` imports on use
    from seqlab.api.data import DataDir, prepare, thunderbird
    from seqlab.api.lessons import (
        attention_weights,
        lesson,
        lesson_names,
        self_attention_layer,
        soft_lookup,
        softmax,
        state_numbers,
    )
    from seqlab.api.presets import preset
    from seqlab.api.runs import Run, load
    from seqlab.api.training import train
    from seqlab.api.views import Attention, Inspection, NextToken, Score
    from seqlab.config import DataConfig, ModelConfig, RunConfig, TrainConfig
    from seqlab.errors import UserError
    from seqlab.evaluation.heldout import lm_loss
    from seqlab.generation.complete import Completion
    from seqlab.inspection.probes import LookupMath
    from seqlab.models import LM, LMState, build_model
    from seqlab.studies.lessons.common import LessonResult
    from seqlab.training.progress import StepReport


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'seqlab' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # the next lookup is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})
