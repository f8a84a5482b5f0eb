"""`RunConfig`, the whole configuration of a training run (`model`, `data`, `train`), and its config.json
form: to and from nested dicts, the old context fields migrated on the way in."""

from __future__ import annotations

import dataclasses
import json
import typing
from dataclasses import dataclass, field
from typing import Any

from seqlab.config.context_migration import migrate_model_dict
from seqlab.config.sections import DataConfig, ModelConfig, TrainConfig, _check


@dataclass(frozen=True)
class RunConfig:
    """The whole configuration of a training run."""

    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)

    def to_dict(self) -> dict[str, Any]:
        """The config as nested plain dicts, one per section (what config.json holds)."""
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        """The config as config.json's text: indented, keys sorted."""
        return json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RunConfig:
        """The config `to_dict` gave (a missing section or field takes its default; the model's old context
        fields are migrated); ValueError naming an unknown section or field, or a bad value."""
        sections = {f.name: f for f in dataclasses.fields(cls)}
        unknown = set(d) - set(sections)
        _check(not unknown, f"unknown config section(s): {', '.join(sorted(unknown))}")
        kwargs = {}
        for name in sections:
            sub_cls = typing.get_type_hints(cls)[name]
            sub = d.get(name, {})
            if name == "model":
                sub = migrate_model_dict(sub)
            known = {g.name for g in dataclasses.fields(sub_cls)}
            bad = set(sub) - known
            _check(not bad, f"unknown config field(s): {', '.join(f'{name}.{b}' for b in sorted(bad))}")
            kwargs[name] = sub_cls(**sub)
        return cls(**kwargs)
