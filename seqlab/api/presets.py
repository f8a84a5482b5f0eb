"""`seqlab.preset`: a run's configuration from Python, for `seqlab.train` or a training loop of your own.

No torch here: the config types are plain dataclasses (`seqlab.config`), so building one is instant.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from seqlab.api.training import override_strings
from seqlab.config import RunConfig, apply_overrides, get_preset
from seqlab.errors import UserError


def preset(name: str = "small", *settings: str, **sections: Mapping[str, Any]) -> RunConfig:
    """The `RunConfig` of preset `name` ("tiny", "small", "base") with overrides applied: `settings` as the CLI's
    "section.field=value" strings, `sections` as mappings (`model={"mixer": "gru"}`). Its `.model` is the
    `ModelConfig` that `seqlab.build_model` takes. A bad name, field or value is a `UserError`."""
    try:
        return apply_overrides(get_preset(name), [*settings, *override_strings(sections)])
    except ValueError as exc:
        raise UserError(str(exc)) from None
