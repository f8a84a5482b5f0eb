"""The three sections of a run's configuration, `model`, `data` and `train`: frozen dataclasses validated on
construction, and the `Literal[...]` types of their choice fields, each checked by one function.

A field with a fixed set of values is typed `Literal[...]`, and `__post_init__` checks every such field against
its type, so the allowed values are written once.
"""

from __future__ import annotations

import functools
import math
import typing
from dataclasses import dataclass
from typing import Any, Literal

Mixer = Literal["rnn", "gru", "mingru", "attention", "hybrid"]
Position = Literal["none", "learned", "sinusoidal", "rope", "alibi"]
HybridCell = Literal["gru", "mingru"]
# What the model reads of a context (the message answered) and how; the one choice of four readers:
#   none             no context
#   cross            its encoder, read by cross-attention after every mixer
#   cross+copy       the same, and a copy head (pointer-generator, models/copy.py) over its tokens
#   init_state       recurrent families: each recurrent layer starts an email from a state projected from
#                    the pooled context (models/context_encoder.py)
#   init_state+copy  the same, and the copy head
#   pointer          only the copy head reads it (no cross-attention, no initial state)
Context = Literal["none", "cross", "cross+copy", "init_state", "init_state+copy", "pointer"]
DataMode = Literal["auto", "windows", "stream"]
Device = Literal["auto", "cpu", "cuda", "mps"]
Schedule = Literal["cosine", "wsd"]
Optimizer = Literal["adamw", "muon"]
Precision = Literal["auto", "fp32", "bf16"]

MIXERS: tuple[str, ...] = typing.get_args(Mixer)
# mixers that carry a recurrent state (the hybrid's recurrent layers too): trained on streams, and given
# only additive positions (their attention, if any, is local and reads order from the recurrence)
RECURRENT_MIXERS = ("rnn", "gru", "mingru", "hybrid")
HYBRID_CELLS: tuple[str, ...] = typing.get_args(HybridCell)
CONTEXTS: tuple[str, ...] = typing.get_args(Context)
POSITIONS: tuple[str, ...] = typing.get_args(Position)
# Positions added to the token embedding work for any mixer; rotary and ALiBi act inside attention.
ADDITIVE_POSITIONS = ("none", "learned", "sinusoidal")
MAX_THREADS = 1024  # torch takes a C int; far more threads than cores only thrashes


def _check(cond: bool, message: str) -> None:
    if not cond:
        raise ValueError(message)


def _spoken(choices: tuple[str, ...]) -> str:
    """("a", "b", "c") -> "a, b or c": the allowed values as an error message says them."""
    return choices[0] if len(choices) == 1 else f"{', '.join(choices[:-1])} or {choices[-1]}"


@functools.cache
def _choices(cls: type) -> dict[str, tuple[str, ...]]:
    """The `Literal[...]` fields of a config class and their allowed values."""
    return {name: typing.get_args(hint) for name, hint in typing.get_type_hints(cls).items()
            if typing.get_origin(hint) is Literal}


def _check_choices(cfg: Any, section: str) -> None:
    """Each `Literal[...]` field of `cfg` holds one of its values: the one check of every choice field."""
    for name, allowed in _choices(type(cfg)).items():
        value = getattr(cfg, name)
        _check(value in allowed, f"{section}.{name} must be {_spoken(allowed)}, not {value!r}")


@dataclass(frozen=True)
class ModelConfig:
    """Everything `build_model` needs; saved verbatim in `config.json`."""

    vocab_size: int = 259
    block_size: int = 256  # longest window (attention) / truncated-BPTT chunk (recurrent) in tokens
    mixer: Mixer = "attention"
    n_layer: int = 2
    n_embd: int = 128
    n_head: int = 4  # attention heads; d_k = n_embd / n_head
    pos: Position = "rope"
    dropout: float = 0.0
    bias: bool = False  # biases in attention/MLP projections
    mlp_ratio: int = 4  # MLP hidden width = mlp_ratio * n_embd; 0 disables the MLP
    context: Context = "none"  # what the model reads of the message answered, and how (the table above)
    ctx_layers: int = 1  # non-causal attention blocks of the context encoder (models/context_encoder.py); 0: none
    ctx_block_size: int = 256  # longest context in tokens (the end of a longer one is kept)
    # kept for the lecture's parameter count with and without the tie (tests/test_lm.py); tied by default
    tie_weights: bool = True  # output head shares the token embedding matrix
    # off: the gate-by-gate loop, for the lessons that compare it with PyTorch's kernel (studies/lessons)
    fused_rnn: bool = True  # run RNN/GRU through torch.nn.RNN/GRU when no per-step inspection is asked
    qk_norm: bool = False  # RMSNorm on each head's queries and keys before the dot product (a recipe option)
    # hybrid: one letter per layer, r = recurrent (hybrid_cell), a = local attention over attn_window
    # tokens; a pattern shorter than n_layer repeats (Griffin's "rra" is two recurrent, one attention)
    hybrid_pattern: str = "ra"
    hybrid_cell: HybridCell = "gru"
    attn_window: int = 64  # tokens a hybrid's local attention sees, itself included

    def layer_kinds(self) -> str:
        """The hybrid's pattern tiled over n_layer layers ("ra", 3 layers -> "rar")."""
        p = self.hybrid_pattern
        return (p * (-(-self.n_layer // len(p))))[: self.n_layer] if p else ""

    @property
    def reads_context(self) -> bool:
        """Whether the model has a context encoder and is fed the contexts (any `context` but none)."""
        return self.context != "none"

    @property
    def cross_attends(self) -> bool:
        """Whether every block reads the context by cross-attention after its mixer."""
        return self.context in ("cross", "cross+copy")

    @property
    def context_init(self) -> bool:
        """Whether each recurrent layer starts an email from a state projected from the pooled context."""
        return self.context in ("init_state", "init_state+copy")

    @property
    def copies(self) -> bool:
        """Whether a copy head mixes a pointer over the context's tokens into the next-token distribution."""
        return self.context in ("cross+copy", "init_state+copy", "pointer")

    def __post_init__(self) -> None:
        _check_choices(self, "model")
        for name in ("vocab_size", "block_size", "n_layer", "n_embd", "n_head"):
            _check(getattr(self, name) >= 1, f"model.{name} must be at least 1, not {getattr(self, name)}")
        _check(self.mlp_ratio >= 0, f"model.mlp_ratio must be 0 or more, not {self.mlp_ratio}")
        _check(self.ctx_layers >= 0, f"model.ctx_layers must be 0 or more, not {self.ctx_layers}")
        _check(self.ctx_block_size >= 1, f"model.ctx_block_size must be at least 1, not {self.ctx_block_size}")
        _check(0.0 <= self.dropout < 1.0, f"model.dropout must be in [0, 1), not {self.dropout}")
        _check(not self.context_init or self.mixer in RECURRENT_MIXERS,
               f"model.context={self.context} gives recurrent layers their initial state; model.mixer={self.mixer} "
               "has none (use model.context=cross)")
        if self.mixer == "hybrid":
            self._check_hybrid()
        if self.mixer in ("attention", "hybrid") or self.reads_context:
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

    def _check_hybrid(self) -> None:
        _check(bool(self.hybrid_pattern) and set(self.hybrid_pattern) <= {"r", "a"},
               f"model.hybrid_pattern must be letters r (recurrent) and a (attention), not {self.hybrid_pattern!r}")
        _check(set(self.layer_kinds()) == {"r", "a"},
               f"model.hybrid_pattern={self.hybrid_pattern} over model.n_layer={self.n_layer} gives "
               f"{self.layer_kinds()!r}: a hybrid needs at least one r and one a layer")
        _check(self.attn_window >= 1, f"model.attn_window must be at least 1, not {self.attn_window}")

    @property
    def head_dim(self) -> int:
        """Width of one attention head, n_embd // n_head (d_k of the lecture)."""
        return self.n_embd // self.n_head


@dataclass(frozen=True)
class DataConfig:
    """How training examples are formed from a prepared DATA_DIR."""

    # windows: independent windows inside one email (attention); stream: each batch lane reads emails
    # consecutively with a reset flag at email starts (truncated BPTT); auto: stream for recurrent mixers.
    mode: DataMode = "auto"
    # keep an email's padding-only tail out of the windows of an attention model
    min_window_tokens: int = 2

    def __post_init__(self) -> None:
        _check_choices(self, "data")
        _check(self.min_window_tokens >= 2, f"data.min_window_tokens must be at least 2, not {self.min_window_tokens}")

    def resolved_mode(self, mixer: str) -> str:
        """"windows" or "stream" for `mixer`: `mode`, with "auto" meaning stream for recurrent mixers."""
        if self.mode != "auto":
            return self.mode
        return "stream" if mixer in RECURRENT_MIXERS else "windows"


@dataclass(frozen=True)
class TrainConfig:
    """Optimisation, schedule, evaluation and checkpoint cadence."""

    max_steps: int = 2000
    # a time budget in the training steps' own time: validation and checkpoints come on top of it
    # (docs/training.md says how much); 0 means no budget
    max_minutes: float = 0.0
    batch_size: int = 16
    grad_accum: int = 1  # a batch larger than memory holds, as micro-batches summed into one step
    lr: float = 3e-3
    min_lr_ratio: float = 0.1  # both schedules end at lr * min_lr_ratio, not 0: the last steps still learn
    warmup_steps: int = 100
    weight_decay: float = 0.1  # applied to matrices only
    beta1: float = 0.9
    beta2: float = 0.95
    grad_clip: float = 1.0  # 0 disables clipping
    eval_every: int = 200
    eval_batches: int = 16  # validation: fixed whole emails of about eval_batches x batch_size x block_size targets
    ckpt_every: int = 200
    log_every: int = 10
    # a long run on a small corpus stops once it overfits instead of spending its budget; off by default
    early_stop: int = 0  # stop after this many evaluations without improvement; 0 disables
    max_bad_steps: int = 5  # stop after this many steps in a row with a non-finite loss or gradient
    seed: int = 1337
    device: Device = "auto"
    # cosine | wsd (warmup, constant, linear cooldown; training/optim.py). The presets choose wsd; the
    # default stays cosine so a run saved before this field existed resumes on its own schedule
    schedule: Schedule = "cosine"
    cooldown_frac: float = 0.2  # wsd: share of the budget (steps or minutes) spent cooling down
    ema: float = 0.0  # decay of the weight average used for validation and saved; 0 = off (training/ema.py)
    optimizer: Optimizer = "adamw"  # muon: Muon for the hidden matrices, AdamW for the rest (training/optim.py)
    # torch.compile for a GPU run; off by default because on the CPU it did not pay (seqlab bench, compile rows)
    compile: bool = False
    threads: int = 0  # torch intra-op threads; 0: the cores actually free (training/cpu_threads.py)
    # the forward pass under bf16 autocast or not; auto takes bf16 where the device has native bf16
    # arithmetic (a CUDA GPU, a CPU with AVX512_BF16 / AMX; runs/precision.py)
    precision: Precision = "auto"

    def __post_init__(self) -> None:
        _check_choices(self, "train")
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
        _check(0.0 < self.cooldown_frac <= 1.0, f"train.cooldown_frac must be in (0, 1], not {self.cooldown_frac}")
        _check(self.ema == 0.0 or 0.0 < self.ema < 1.0, f"train.ema must be 0 (off) or in (0, 1), not {self.ema}")
