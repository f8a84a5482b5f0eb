"""One decoding step of an LM without the module machinery: the same arithmetic, far less overhead.

Decoding feeds one token at a time, and for the models an autocomplete serves (2 layers, 128 wide) a
single-token forward pass is almost all fixed cost: about 80 small tensor operations behind
`nn.Module.__call__`, each a few microseconds, around matrix-vector products that take less. A
suggestion of 3 words is about 17 such steps, so this overhead, not arithmetic, is what a keystroke
waits for (`seqlab bench --only latency`, ARCHITECTURE.md "serving").

`FastStep.of(model)` looks at an `LM` once and, when every block is a kind it knows (self-attention, the
RNN or GRU mixer, cross-attention read from its cached keys and values), returns a step that runs the
blocks' own parameters through the functional ops directly:

- attention: Q, K and V in one matmul through a weight concatenated once per decoder (the module
  concatenates it at every call), then the module's own `self_attend` (models/attention.py: QK-norm,
  the positions' `rotate` and score bias, the `KVCache`, the mask and the attention, the one code
  training and scoring run too), then W_O; additive positions through the LM's own `embed`;
- RNN / GRU: `torch.rnn_tanh_cell` / `torch.gru_cell`, PyTorch's one-step kernels on the same
  parameters and equations as `seqlab.models.rnn` (gate order r, z, n);
- norms, the MLP and the head as in `seqlab.models.block.Block` / `LM.forward` (dropout is off in eval).

Anything else (minGRU, the hybrid, a wrapper such as `PhraseBlend`, training mode, an attention
recorder or a GRU asked to record its gates) gets None or `usable() == False`, and the decoder calls the
model as before. The result equals `model(tokens[:, None], state)` up to float rounding, and the state it
returns is the same `LMState`: tests/test_fast_step_agreement.py steps every configuration this step
takes side by side with the full forward pass and fails (there is no quiet fallback at run time) when
they differ, and fails too when `ModelConfig` gains an option the test does not yet cover.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from seqlab.models.attention import MultiHeadAttention
from seqlab.models.block import Block
from seqlab.models.kv_cache import KVCache
from seqlab.models.lm import LM, LMState
from seqlab.models.positional import PositionHandler
from seqlab.models.recorder import active_recorder

Norm = tuple[Tensor, "Tensor | None", float]  # a LayerNorm's weight, bias and eps


def _norm(ln: nn.Module | None) -> Norm | None:
    return None if ln is None else (ln.weight, ln.bias, ln.eps)


@dataclass
class _BlockPlan:
    """One block's parameters as plain tensors (an `nn.Module` attribute lookup costs as much as a small
    op), its kind, and the modules whose hooks the step calls (positions, QK-norm, cross-attention)."""

    kind: str  # "attention" | "rnn" | "gru"
    mixer: nn.Module
    ln_1: Norm
    w: Tensor  # attention: [W_Q; W_K | W_V] (3C, C), concatenated once; recurrent: W_ih (G*C, C)
    b: Tensor | None
    w2: Tensor  # attention: W_O (C, C); recurrent: W_hh (G*C, C)
    b2: Tensor | None
    mlp: tuple[Norm, Tensor, Tensor | None, Callable[[Tensor], Tensor], Tensor, Tensor | None] | None
    xattn: tuple[nn.Module, nn.Module] | None  # (ln_x, the cross-attention module)


def _plan_block(block: nn.Module) -> _BlockPlan | None:
    """The plan of one `Block`, or None for a mixer this step does not know."""
    from seqlab.models.rnn import RecurrentMixer  # a recurrent model's module, loaded only for one

    if type(block) is not Block or "forward" in vars(block):  # a subclass or a patched block may differ
        return None
    mixer = block.mixer
    mlp = None
    if block.mlp is not None:
        m = block.mlp
        # the exact GELU called directly (the module's call costs as much as the op)
        act = partial(F.gelu, approximate=m.act.approximate) if type(m.act) is nn.GELU else m.act
        mlp = (_norm(block.ln_2), m.fc.weight, m.fc.bias, act, m.proj.weight, m.proj.bias)
    xattn = (block.ln_x, block.xattn) if block.xattn is not None else None
    ln_1 = _norm(block.ln_1)
    if type(mixer) is MultiHeadAttention:  # a subclass (the hybrid's local attention) has its own forward
        if mixer.kdim != mixer.n_embd:
            return None
        w = torch.cat((mixer.q_proj.weight, mixer.kv_proj.weight)).detach()  # (3C, C)
        b = None if mixer.q_proj.bias is None else torch.cat((mixer.q_proj.bias, mixer.kv_proj.bias)).detach()
        return _BlockPlan("attention", mixer, ln_1, w, b, mixer.out_proj.weight, mixer.out_proj.bias, mlp, xattn)
    if type(mixer) is RecurrentMixer and mixer.kind in ("rnn", "gru"):
        c = mixer.cell
        return _BlockPlan(mixer.kind, mixer, ln_1, c.weight_ih_l0, c.bias_ih_l0, c.weight_hh_l0, c.bias_hh_l0,
                          mlp, xattn)
    return None


class FastStep:
    """`step(tokens (B,), state) -> (next-token logits (B, V), state after them)` for one LM."""

    def __init__(self, model: LM, plans: list[_BlockPlan]) -> None:
        self.model, self.plans = model, plans
        self.n_embd, self.n_head = model.cfg.n_embd, model.cfg.n_head
        self.wte, self.head = model.wte.weight, model.head.weight  # (V, C) each (the same one when tied)
        self.ln_f = _norm(model.ln_f)
        # additive position vectors (learned, sinusoidal); the base handler's embed gives None
        self.embed = None if type(model.pos).embed is PositionHandler.embed else model.pos.embed

    @classmethod
    def of(cls, model: nn.Module) -> FastStep | None:
        """A fast step for `model`, or None when it is not a plain `LM` of known blocks."""
        if type(model) is not LM or model.copy_head is not None:  # a subclass or a wrapper may change
            return None  # forward, and a copy head mixes in a pointer (models/copy.py): use the model as it is
        plans = [_plan_block(b) for b in model.blocks]
        if any(p is None for p in plans) or model.training:
            return None
        return cls(model, [p for p in plans if p is not None])

    def usable(self, state: object, check_state: bool = True) -> bool:
        """Whether this step may replace `model(tokens, state)` now: eval mode, a state to continue, and
        nobody recording what the modules compute (inspection goes through the modules)."""
        if self.model.training or (check_state and not isinstance(state, LMState)) or active_recorder() is not None:
            return False
        return not any(p.kind == "gru" and p.mixer.record_gates for p in self.plans)

    def __call__(self, tokens: Tensor, state: LMState) -> tuple[Tensor, LMState]:
        """tokens (B,) long, state after the earlier tokens -> logits (B, V) float, the new state."""
        c = (self.n_embd,)
        x = F.embedding(tokens, self.wte)  # (B, C): one position per lane, so no time axis
        if self.embed is not None:
            x = x + self.embed(state.pos[:, None])[:, 0].to(x.dtype)  # (B, 1, C) -> (B, C)
        layers = []
        for plan, layer_state, cross in zip(self.plans, state.layers, state.cross):
            a = F.layer_norm(x, c, *plan.ln_1)
            if plan.kind == "attention":
                h, layer_state = self._attend(plan, a, layer_state)
            else:  # PyTorch's one-step cells: the equations of seqlab.models.rnn, gate order r, z, n
                cell = torch.gru_cell if plan.kind == "gru" else torch.rnn_tanh_cell
                h = layer_state = cell(a, layer_state, plan.w, plan.w2, plan.b, plan.b2)
            x = x + h
            if plan.xattn is not None and cross is not None:  # the context's cached keys and values
                ln_x, xattn = plan.xattn
                h, _ = xattn(ln_x(x[:, None]), state=cross)  # (B, 1, C)
                x = x + h[:, 0]
            if plan.mlp is not None:
                ln_2, w_fc, b_fc, act, w_proj, b_proj = plan.mlp
                x = x + F.linear(act(F.linear(F.layer_norm(x, c, *ln_2), w_fc, b_fc)), w_proj, b_proj)
            layers.append(layer_state)
        logits = F.linear(F.layer_norm(x, c, *self.ln_f), self.head)  # (B, V)
        return logits, LMState(layers, list(state.cross), state.pos + 1)

    def _attend(self, plan: _BlockPlan, a: Tensor, cache: KVCache) -> tuple[Tensor, KVCache]:
        """Self-attention of one new token per lane: a (B, C) -> (B, C); the cache grows by one. The
        module's own `self_attend` (QK-norm, positions, cache, mask, attention), around a projection
        by the concatenated weight and W_O as plain tensors."""
        b = a.size(0)
        # (B, 3C) -> 3 x (B, H, 1, D): with one position the head split is a plain view
        q, k, v = F.linear(a, plan.w, plan.b).view(b, 3, self.n_head, 1, -1).unbind(1)
        y, cache = plan.mixer.self_attend(q, k, v, cache)  # (B, H, 1, D)
        return F.linear(y.reshape(b, self.n_embd), plan.w2, plan.b2), cache
