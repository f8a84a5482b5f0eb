"""What `Run`'s reading methods return: arrays you can compute with, figures you can show, and `save` for the
files `seqlab attention` / `seqlab inspect` write.

`Score` (per-token log-probabilities and bits per byte of one text), `NextToken` (one candidate of
`Run.next_tokens`), `Attention` (every chosen head's (L, L) weights and the soft lookup of one query, lecture
slide "One weighted combination uses values, not token IDs") and `Inspection` (position encodings and GRU
gates). Figures are matplotlib `Figure`s on an Agg canvas (`seqlab.inspection.figures`): in a notebook,
`%matplotlib inline` then displaying one draws it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from seqlab.private_files import private_umask

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from seqlab.inspection.probes import AttentionMaps, SoftLookup


@dataclass(frozen=True)
class Score:
    """How well a run's model predicts one text, `[bos] + text + [eos]`, token by token.

    `logprobs[t]` is ln p(token t+1 | tokens 0..t) for each of the `len(ids) - 1` targets (the first target
    is the text's first token, the last is <eos>); `target_bytes[t]` the bytes of text that target stands
    for (<eos> counts as the one separator byte between emails). Bits per byte counts every target's loss,
    <eos> included, over those bytes, as `seqlab eval` does over a split.
    """

    ids: list[int]
    labels: list[str]  # one readable label per id (whitespace shown as ␣ ⏎)
    logprobs: np.ndarray  # (len(ids) - 1,) natural log
    target_bytes: np.ndarray  # (len(ids) - 1,)

    @property
    def bits(self) -> float:
        """The text's total code length under the model, in bits."""
        return float(-self.logprobs.sum() / math.log(2))

    @property
    def bits_per_byte(self) -> float:
        """`bits` over the text's UTF-8 bytes (lower is better; 8 is a byte spelled out)."""
        return self.bits / max(1, int(self.target_bytes.sum()))

    @property
    def loss(self) -> float:
        """Mean negative log-probability per target token, in nats (the training loss)."""
        return float(-self.logprobs.mean())


@dataclass(frozen=True)
class NextToken:
    """One candidate for the next token: its id, the text it stands for, and the model's probability."""

    id: int
    text: str
    probability: float


@dataclass
class Attention:
    """Attention weights of a run's model over one text, and the soft lookup of one query token.

    `weights[(layer, head)]` is an (L, L) array: row i = query token i, column j = key token j, zero above
    the diagonal (the causal mask hides the future); each row sums to 1. `labels` name the L tokens
    (`ids`, <bos> first). `lookup` takes one row apart: `lookup.math.scores`, `.weights`, `.contributions`
    and `.output` (y = sum_j a_j v_j), which equals `lookup.head_output`, what the head computed.
    """

    maps: AttentionMaps
    lookup: SoftLookup
    title: str = "Attention"

    @property
    def weights(self) -> dict[tuple[int, int], np.ndarray]:
        """(layer, head) -> the (L, L) weight matrix: row = query token, column = key token."""
        return self.maps.weights

    @property
    def labels(self) -> list[str]:
        """One readable label per token (<bos> first, whitespace shown as ␣ ⏎)."""
        return self.maps.labels

    @property
    def ids(self) -> list[int]:
        """The token ids the model read."""
        return self.maps.ids

    def figure(self) -> Figure:
        """The heatmap grid: one panel per chosen (layer, head), tokens on both axes."""
        from seqlab.inspection.plots import attention_figure

        return attention_figure(self.maps)

    def lookup_figure(self) -> Figure:
        """The soft lookup of the query token: its weight on every earlier key, and the heaviest keys' numbers."""
        from seqlab.inspection.plots import soft_lookup_figure

        return soft_lookup_figure(self.lookup)

    @private_umask()  # the plots show the person's text
    def save(self, out: str | Path) -> list[Path]:
        """Write FILE.png (and FILE-lookup.png) or one FILE.html, as `seqlab attention` does; the files written."""
        from seqlab.inspection.commands import save_attention

        return save_attention(self.maps, self.lookup, out, self.title)


@dataclass
class Inspection:
    """Position information and recurrent gates of a run's model, as arrays.

    `sinusoidal` (block_size, n_embd): the sinusoidal encoding PE[p, i]; `position_similarity` (P, P): the
    cosine similarity of learned position vectors (None unless model.pos is learned); `gates`: for each
    GRU layer, (token labels, reset gate r (L, C), update gate z (L, C)) over the text (empty for other
    mixers).
    """

    sinusoidal: np.ndarray
    position_similarity: np.ndarray | None
    gates: list[tuple[list[str], np.ndarray, np.ndarray]] = field(default_factory=list)

    def figures(self) -> dict[str, Figure]:
        """One figure per view: "sinusoidal", "position-similarity" (learned positions), "gates-layer{L}"."""
        from seqlab.inspection.plots import gates_figure, matrix_figure

        figs = {"sinusoidal": matrix_figure(self.sinusoidal, "Sinusoidal position encoding",
                                            "dimension i", "position p", "PE[p, i]", True)}
        if self.position_similarity is not None:
            figs["position-similarity"] = matrix_figure(self.position_similarity, "Cosine similarity of learned "
                                                        "position embeddings", "position", "position",
                                                        "cos(P_i, P_j)", True)
        for layer, (labels, r, z) in enumerate(self.gates):
            figs[f"gates-layer{layer}"] = gates_figure(labels, r, z)
        return figs

    @private_umask()
    def save(self, out_dir: str | Path) -> list[Path]:
        """Write the PNGs `seqlab inspect` writes into `out_dir`; the files written."""
        from seqlab.inspection.commands import save_inspection

        length, width = self.sinusoidal.shape
        return save_inspection(out_dir, length, width, self.position_similarity, self.gates)
