"""Configuration: plain dataclasses validated on construction, presets as functions, `key=value` overrides.

`RunConfig` groups `model`, `data` and `train`; the whole of it is saved to a run's `config.json`, so a
model can always be rebuilt from its run folder. Every field is reachable from the command line as
`section.field=value` (for example `model.mixer=gru train.lr=3e-3`), so the CLI does not grow with the
config.
"""

from __future__ import annotations

import dataclasses
import json
import math
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

MIXERS = ("rnn", "gru", "mingru", "attention", "hybrid")
# mixers that carry a recurrent state (the hybrid's recurrent layers too): trained on streams, and given
# only additive positions (their attention, if any, is local and reads order from the recurrence)
RECURRENT_MIXERS = ("rnn", "gru", "mingru", "hybrid")
HYBRID_CELLS = ("gru", "mingru")
# how a model with model.cross_attention reads its context; pointer: only the copy head (model.copy) reads it
CTX_MODES = ("cross", "init_state", "pointer")
POSITIONS = ("none", "learned", "sinusoidal", "rope", "alibi")
# Positions added to the token embedding work for any mixer; rotary and ALiBi act inside attention.
ADDITIVE_POSITIONS = ("none", "learned", "sinusoidal")
MAX_THREADS = 1024  # torch takes a C int; far more threads than cores only thrashes


def _check(cond: bool, message: str) -> None:
    if not cond:
        raise ValueError(message)


@dataclass
class ModelConfig:
    """Everything `build_model` needs; saved verbatim in `config.json`."""

    vocab_size: int = 259
    block_size: int = 256  # longest window (attention) / truncated-BPTT chunk (recurrent) in tokens
    mixer: str = "attention"  # rnn | gru | mingru | attention | hybrid
    n_layer: int = 2
    n_embd: int = 128
    n_head: int = 4  # attention heads; d_k = n_embd / n_head
    pos: str = "rope"  # none | learned | sinusoidal | rope | alibi
    dropout: float = 0.0
    bias: bool = False  # biases in attention/MLP projections
    mlp_ratio: int = 4  # MLP hidden width = mlp_ratio * n_embd; 0 disables the MLP
    cross_attention: bool = False  # read a context (the message answered): its encoder, read as ctx_mode says
    ctx_layers: int = 1  # non-causal attention blocks of the context encoder (models/context.py); 0: none
    ctx_block_size: int = 256  # longest context in tokens (the end of a longer one is kept)
    # how the blocks read the context: cross (cross-attention after every mixer) or init_state (recurrent
    # families: each recurrent layer starts every email from a state projected from the pooled context)
    ctx_mode: str = "cross"
    # a copy head (pointer-generator, models/copy.py): the next token may be copied from the context;
    # with ctx_mode=pointer it is the only reader of the context (no cross-attention, no initial state)
    copy: bool = False
    tie_weights: bool = True  # output head shares the token embedding matrix
    fused_rnn: bool = True  # run RNN/GRU through torch.nn.RNN/GRU when no per-step inspection is asked
    qk_norm: bool = False  # RMSNorm on each head's queries and keys before the dot product
    # hybrid: one letter per layer, r = recurrent (hybrid_cell), a = local attention over attn_window
    # tokens; a pattern shorter than n_layer repeats (Griffin's "rra" is two recurrent, one attention)
    hybrid_pattern: str = "ra"
    hybrid_cell: str = "gru"  # gru | mingru
    attn_window: int = 64  # tokens a hybrid's local attention sees, itself included

    def layer_kinds(self) -> str:
        """The hybrid's pattern tiled over n_layer layers ("ra", 3 layers -> "rar")."""
        p = self.hybrid_pattern
        return (p * (-(-self.n_layer // len(p))))[: self.n_layer] if p else ""

    def __post_init__(self) -> None:
        _check(self.mixer in MIXERS, f"model.mixer must be one of {', '.join(MIXERS)}, not {self.mixer!r}")
        _check(self.pos in POSITIONS, f"model.pos must be one of {', '.join(POSITIONS)}, not {self.pos!r}")
        for name in ("vocab_size", "block_size", "n_layer", "n_embd", "n_head"):
            _check(getattr(self, name) >= 1, f"model.{name} must be at least 1, not {getattr(self, name)}")
        _check(self.mlp_ratio >= 0, f"model.mlp_ratio must be 0 or more, not {self.mlp_ratio}")
        _check(self.ctx_layers >= 0, f"model.ctx_layers must be 0 or more, not {self.ctx_layers}")
        _check(self.ctx_block_size >= 1, f"model.ctx_block_size must be at least 1, not {self.ctx_block_size}")
        _check(0.0 <= self.dropout < 1.0, f"model.dropout must be in [0, 1), not {self.dropout}")
        _check(self.ctx_mode in CTX_MODES,
               f"model.ctx_mode must be one of {', '.join(CTX_MODES)}, not {self.ctx_mode!r}")
        _check(self.ctx_mode != "init_state" or self.mixer in RECURRENT_MIXERS,
               f"model.ctx_mode=init_state gives recurrent layers their initial state; model.mixer={self.mixer} "
               "has none (use model.ctx_mode=cross)")
        _check(self.ctx_mode == "cross" or self.cross_attention,
               f"model.ctx_mode={self.ctx_mode} says how a context is read; it needs model.cross_attention=true, "
               "which gives the model its context encoder and feeds it the contexts")
        _check(not self.copy or self.cross_attention,
               "model.copy=true copies tokens from the context (the message answered); it needs "
               "model.cross_attention=true, which gives the model its context encoder and feeds it the contexts")
        _check(self.ctx_mode != "pointer" or self.copy,
               "model.ctx_mode=pointer leaves the context to the copy head alone; it needs model.copy=true")
        if self.mixer == "hybrid":
            _check(bool(self.hybrid_pattern) and set(self.hybrid_pattern) <= {"r", "a"},
                   f"model.hybrid_pattern must be letters r (recurrent) and a (attention), not {self.hybrid_pattern!r}")
            _check(set(self.layer_kinds()) == {"r", "a"},
                   f"model.hybrid_pattern={self.hybrid_pattern} over model.n_layer={self.n_layer} gives "
                   f"{self.layer_kinds()!r}: a hybrid needs at least one r and one a layer")
            _check(self.hybrid_cell in HYBRID_CELLS,
                   f"model.hybrid_cell must be one of {', '.join(HYBRID_CELLS)}, not {self.hybrid_cell!r}")
            _check(self.attn_window >= 1, f"model.attn_window must be at least 1, not {self.attn_window}")
        if self.mixer in ("attention", "hybrid") or self.cross_attention:
            _check(
                self.n_embd % self.n_head == 0,
                f"model.n_embd={self.n_embd} must be divisible by model.n_head={self.n_head}",
            )
        if self.mixer in RECURRENT_MIXERS:
            _check(
                self.pos in ADDITIVE_POSITIONS,
                f"model.pos={self.pos} acts inside attention and cannot be used with model.mixer={self.mixer}",
            )
        if self.pos == "rope" and self.mixer == "attention":
            _check(
                (self.n_embd // self.n_head) % 2 == 0,
                f"model.pos=rope needs an even head width, but n_embd/n_head = {self.n_embd // self.n_head}",
            )

    @property
    def head_dim(self) -> int:
        """Width of one attention head, n_embd // n_head (d_k of the lecture)."""
        return self.n_embd // self.n_head


@dataclass
class DataConfig:
    """How training examples are formed from a prepared DATA_DIR."""

    # windows: independent windows inside one email (attention); stream: each batch lane reads emails
    # consecutively with a reset flag at email starts (truncated BPTT); auto: stream for recurrent mixers.
    mode: str = "auto"
    # keep an email's padding-only tail out of the windows of an attention model
    min_window_tokens: int = 2

    def __post_init__(self) -> None:
        _check(self.mode in ("auto", "windows", "stream"),
               f"data.mode must be auto, windows or stream, not {self.mode!r}")
        _check(self.min_window_tokens >= 2, f"data.min_window_tokens must be at least 2, not {self.min_window_tokens}")

    def resolved_mode(self, mixer: str) -> str:
        """"windows" or "stream" for `mixer`: `mode`, with "auto" meaning stream for recurrent mixers."""
        if self.mode != "auto":
            return self.mode
        return "stream" if mixer in RECURRENT_MIXERS else "windows"


@dataclass
class TrainConfig:
    """Optimisation, schedule, evaluation and checkpoint cadence."""

    max_steps: int = 2000
    max_minutes: float = 0.0  # wall-clock budget; 0 means no budget
    batch_size: int = 16
    grad_accum: int = 1
    lr: float = 3e-3
    min_lr_ratio: float = 0.1  # cosine decays to lr * min_lr_ratio
    warmup_steps: int = 100
    weight_decay: float = 0.1  # applied to matrices only
    beta1: float = 0.9
    beta2: float = 0.95
    grad_clip: float = 1.0  # 0 disables clipping
    eval_every: int = 200
    eval_batches: int = 16  # validation: fixed whole emails of about eval_batches x batch_size x block_size targets
    ckpt_every: int = 200
    log_every: int = 10
    early_stop: int = 0  # stop after this many evaluations without improvement; 0 disables
    max_bad_steps: int = 5  # stop after this many steps in a row with a non-finite loss or gradient
    seed: int = 1337
    device: str = "auto"  # auto | cpu | cuda | mps
    # cosine | wsd (warmup, constant, linear cooldown; training/optim.py). The presets choose wsd; the
    # default stays cosine so a run saved before this field existed resumes on its own schedule
    schedule: str = "cosine"
    cooldown_frac: float = 0.2  # wsd: share of the budget (steps or minutes) spent cooling down
    ema: float = 0.0  # decay of the weight average used for validation and saved; 0 = off (training/ema.py)
    optimizer: str = "adamw"  # adamw | muon (Muon for the hidden matrices, AdamW for the rest)
    compile: bool = False  # off: on CPU it did not pay over a 10-minute run (seqlab bench, compile rows)
    threads: int = 0  # torch intra-op threads; 0: the cores actually free (training/threads.py)
    # auto | fp32 | bf16: the forward pass under bf16 autocast or not; auto takes bf16 where the device has
    # native bf16 arithmetic (a CUDA GPU, a CPU with AVX512_BF16 / AMX; runs/precision.py)
    precision: str = "auto"

    def __post_init__(self) -> None:
        for name in ("max_steps", "batch_size", "grad_accum", "eval_every", "eval_batches", "ckpt_every", "log_every",
                     "max_bad_steps"):
            _check(getattr(self, name) >= 1, f"train.{name} must be at least 1, not {getattr(self, name)}")
        for name in ("warmup_steps", "early_stop", "threads", "seed"):
            _check(getattr(self, name) >= 0, f"train.{name} must be 0 or more, not {getattr(self, name)}")
        _check(0 < self.lr < math.inf, f"train.lr must be positive and finite, not {self.lr}")
        _check(0.0 <= self.min_lr_ratio <= 1.0, f"train.min_lr_ratio must be in [0, 1], not {self.min_lr_ratio}")
        _check(self.max_minutes >= 0, f"train.max_minutes must be 0 or more, not {self.max_minutes}")
        _check(0 <= self.weight_decay < math.inf,
               f"train.weight_decay must be 0 or more and finite, not {self.weight_decay}")
        _check(self.grad_clip >= 0, f"train.grad_clip must be 0 or more, not {self.grad_clip}")
        for name in ("beta1", "beta2"):  # AdamW's own check, made here so a bad value is a user error
            _check(0.0 <= getattr(self, name) < 1.0, f"train.{name} must be in [0, 1), not {getattr(self, name)}")
        _check(self.seed < 2**64, f"train.seed must be below 2**64 (torch.manual_seed takes 64 bits), not {self.seed}")
        _check(self.threads <= MAX_THREADS, f"train.threads must be at most {MAX_THREADS}, not {self.threads}")
        _check(self.device in ("auto", "cpu", "cuda", "mps"),
               f"train.device must be auto, cpu, cuda or mps, not {self.device!r}")
        _check(self.schedule in ("cosine", "wsd"), f"train.schedule must be cosine or wsd, not {self.schedule!r}")
        _check(0.0 < self.cooldown_frac <= 1.0, f"train.cooldown_frac must be in (0, 1], not {self.cooldown_frac}")
        _check(self.ema == 0.0 or 0.0 < self.ema < 1.0, f"train.ema must be 0 (off) or in (0, 1), not {self.ema}")
        _check(self.optimizer in ("adamw", "muon"), f"train.optimizer must be adamw or muon, not {self.optimizer!r}")
        _check(self.precision in ("auto", "fp32", "bf16"),
               f"train.precision must be auto, fp32 or bf16, not {self.precision!r}")


@dataclass
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
        """The config `to_dict` gave (a missing section or field takes its default); ValueError naming an
        unknown section or field, or a bad value."""
        sections = {f.name: f for f in dataclasses.fields(cls)}
        unknown = set(d) - set(sections)
        _check(not unknown, f"unknown config section(s): {', '.join(sorted(unknown))}")
        kwargs = {}
        for name in sections:
            sub_cls = typing.get_type_hints(cls)[name]
            sub = d.get(name, {})
            known = {g.name for g in dataclasses.fields(sub_cls)}
            bad = set(sub) - known
            _check(not bad, f"unknown config field(s): {', '.join(f'{name}.{b}' for b in sorted(bad))}")
            kwargs[name] = sub_cls(**sub)
        return cls(**kwargs)


# ---------------------------------------------------------------- presets


def preset_tiny() -> RunConfig:
    """Seconds on a CPU: for tests and smoke runs."""
    return RunConfig(
        model=ModelConfig(block_size=32, n_layer=1, n_embd=32, n_head=2, pos="rope", mlp_ratio=2),
        train=TrainConfig(max_steps=30, batch_size=8, lr=3e-3, warmup_steps=5, eval_every=10,
                          eval_batches=4, ckpt_every=10, log_every=5,
                          precision="fp32"),  # exact numbers on every machine; bf16 gains nothing at width 32
    )


def preset_small() -> RunConfig:
    """A useful model in about 10-30 minutes on 2 CPU cores."""
    return RunConfig(
        model=ModelConfig(block_size=128, n_layer=2, n_embd=128, n_head=4, pos="rope", dropout=0.0),
        # wsd: at equal tokens (640k) on SpamAssassin, val 3.13 bits per byte against cosine's 3.21 for
        # attention and 2.92 against 3.02 for the GRU (benchmarks/bench_recipe.py --only schedule,stack)
        train=TrainConfig(max_steps=3000, batch_size=16, lr=3e-3, warmup_steps=100, eval_every=250,
                          eval_batches=32, ckpt_every=250, log_every=25, schedule="wsd"),
    )


def preset_base() -> RunConfig:
    """A GPU run."""
    return RunConfig(
        model=ModelConfig(block_size=512, n_layer=6, n_embd=384, n_head=6, pos="rope", dropout=0.1),
        train=TrainConfig(max_steps=20000, batch_size=64, lr=1e-3, warmup_steps=500, eval_every=1000,
                          eval_batches=64, ckpt_every=1000, log_every=50, schedule="wsd"),
    )


PRESETS: dict[str, Callable[[], RunConfig]] = {"tiny": preset_tiny, "small": preset_small, "base": preset_base}


def get_preset(name: str) -> RunConfig:
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; choose one of {', '.join(PRESETS)}")
    return PRESETS[name]()


# ---------------------------------------------------------------- key=value overrides


def _parse_value(text: str, annotation: Any, key: str) -> Any:
    """Turn the text of an override into the field's declared type, or raise ValueError naming the key."""
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


def apply_overrides(cfg: RunConfig, overrides: list[str]) -> RunConfig:
    """Return a new config with `section.field=value` overrides applied and everything re-validated."""
    d = cfg.to_dict()
    hints = {name: typing.get_type_hints(sub) for name, sub in typing.get_type_hints(RunConfig).items()}
    for item in overrides:
        key, sep, value = item.partition("=")
        section, dot, name = key.strip().partition(".")
        if not sep or not dot:
            raise ValueError(f"override {item!r} must look like section.field=value (for example model.mixer=gru)")
        if section not in hints or name not in hints[section]:
            raise ValueError(f"unknown config field {key!r}")
        d[section][name] = _parse_value(value.strip(), hints[section][name], key)
    _fit_positions_to_mixer(d["model"], cfg.model, overrides)
    _fit_depth_to_hybrid(d["model"], cfg.model, overrides)
    return RunConfig.from_dict(d)


def _fit_positions_to_mixer(model: dict[str, Any], before: ModelConfig, overrides: list[str]) -> None:
    """A preset's rotary or ALiBi positions act inside attention; choosing a recurrent mixer over such a
    preset (`--preset small model.mixer=gru`) gives it no position input instead, as every recurrent
    recipe has, unless model.pos is set explicitly (then an impossible pair is still an error)."""
    set_pos = any(item.partition("=")[0].strip() == "model.pos" for item in overrides)
    if (not set_pos and model["mixer"] in RECURRENT_MIXERS and model["pos"] not in ADDITIVE_POSITIONS
            and model["mixer"] != before.mixer):
        model["pos"] = "none"


def _fit_depth_to_hybrid(model: dict[str, Any], before: ModelConfig, overrides: list[str]) -> None:
    """A hybrid needs a recurrent and an attention layer: choosing it over a one-layer preset
    (`--preset tiny model.mixer=hybrid`) gives it the pattern's length in layers (at least 2), unless
    model.n_layer is set explicitly (then a too-shallow hybrid is still an error)."""
    set_depth = any(item.partition("=")[0].strip() == "model.n_layer" for item in overrides)
    if not set_depth and model["mixer"] == "hybrid" and before.mixer != "hybrid" and model["n_layer"] < 2:
        model["n_layer"] = max(2, len(model["hybrid_pattern"]))
