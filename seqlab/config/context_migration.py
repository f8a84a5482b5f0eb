"""The three context fields a config.json held before `model.context` (`cross_attention`, `ctx_mode`,
`copy`), read into it in one place, and the message an override naming one of them gets."""

from __future__ import annotations

from typing import Any

from seqlab.config.sections import CONTEXTS, _check, _spoken

OLD_CONTEXT_KEYS = ("cross_attention", "ctx_mode", "copy")


def _old_context(cross_attention: bool = False, ctx_mode: str = "cross", copy: bool = False) -> str:
    """The `model.context` of a config.json written with the three fields it replaced, which allowed
    exactly six combinations (ctx_mode and copy needed cross_attention; pointer needed copy)."""
    if not cross_attention:
        _check(ctx_mode == "cross" and not copy,
               f"model.ctx_mode={ctx_mode} model.copy={str(copy).lower()} needs model.cross_attention=true")
        return "none"
    _check(ctx_mode in ("cross", "init_state", "pointer"), f"model.ctx_mode must be cross, init_state or "
           f"pointer, not {ctx_mode!r}")
    _check(ctx_mode != "pointer" or copy, "model.ctx_mode=pointer needs model.copy=true")
    return ctx_mode if ctx_mode == "pointer" or not copy else f"{ctx_mode}+copy"


def migrate_model_dict(model: dict[str, Any]) -> dict[str, Any]:
    """A config.json's model section with `cross_attention`, `ctx_mode` and `copy` (runs saved before
    `model.context`) as `context`: the one place an old RUN_DIR's config is read into the new field."""
    old = {k: model[k] for k in OLD_CONTEXT_KEYS if k in model}
    if not old:
        return model
    _check("context" not in model, f"model.context cannot be given with the fields it replaced ({', '.join(old)})")
    return {**{k: v for k, v in model.items() if k not in old}, "context": _old_context(**old)}


def _old_key_message(name: str) -> str:
    return (f"model.{name} is now part of model.context, one of {_spoken(CONTEXTS)} (cross_attention=true "
            "is model.context=cross; with ctx_mode=init_state, model.context=init_state; with copy=true, add "
            "+copy; ctx_mode=pointer is model.context=pointer)")
