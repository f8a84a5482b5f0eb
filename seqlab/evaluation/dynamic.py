"""Dynamic evaluation (`seqlab eval --dynamic`): a model that keeps learning the mail it is scored on.

Krause, Kahembwe, Murray & Renals 2018, "Dynamic Evaluation of Neural Sequence Models" (ICML): score a
segment of the test sequence, then take a gradient step on it, so later segments are predicted by a model
that has seen the earlier ones. Here a segment is one email, since an email is what a writer finishes
before the product could learn from it, and the emails of the split are read

    grouped by sender (senders in the order of their first email), in date order within each sender,

so a person's later mail benefits from their earlier mail, never the reverse. Sender and date come from
each email's `source` in DATA_DIR/emails.jsonl (the message file prepare read, parsed again with the
same reader; emails.jsonl holds no sender or date of its own); an email whose source cannot be read (an
mbox row, a moved corpus) keeps its place in the split after the dated ones of an unknown sender.

For each email in that order, with the weights as they are:
1. its targets are scored (summed NLL in nats, bytes: `heldout.token_byte_lengths`), read as a whole
   email (a model with a window reads it in windows overlapping by half, each target scored once);
2. if it is among the emails completions are measured on (`scored_emails.completion_picks`, the same emails and
   positions as the frozen evaluation), the proposals at its ExactMatch positions and at every position
   of its typed part where the writer is offered a suggestion (`saved_chars`, `ask`) are made;
3. one SGD step on its mean NLL per target: theta <- theta - lr * grad (Krause et al.'s eq. 4, their
   "SGD" dynamic evaluation; their RMS-normalised rule with decay towards the trained weights adapts
   better on long streams but needs gradient statistics from training data, which a person's own mail
   server does not keep). The learning rate (`DEFAULT_LR`) was chosen on the val split of the
   SpamAssassin GRU (docs/suggestions.md, "Dynamic evaluation").

The frozen model's numbers come from the same loop at lr = 0, so the two differ only by the learning
(`lr=0` is the frozen model exactly: tests/test_dynamic_eval.py). The run's weights are copied in
memory first; nothing is written to RUN_DIR. Everything runs in float32 with the model in eval mode (no
dropout), on one email at a time.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from seqlab.data.store import TokenStore
from seqlab.data.tokenizer import Tokenizer
from seqlab.errors import UserError
from seqlab.evaluation.calibration import served_gate
from seqlab.evaluation.context_scores import EmailScores, paired_bootstrap
from seqlab.evaluation.exact_match import Proposal, coverage_table, sample_positions
from seqlab.evaluation.heldout import token_byte_lengths
from seqlab.evaluation.saved_chars import DEFAULT_ASK, TypedEmail, collect_typing, model_proposer, score_typing
from seqlab.evaluation.scored_emails import check_same_tokenizer, completion_picks
from seqlab.generation.complete import complete, split_words
from seqlab.generation.decode import context_limit, model_device
from seqlab.generation.gate import FIRST_WORD
from seqlab.models.context_encoder import ContextBatch
from seqlab.options import EvalOptions
from seqlab.runs.load import load_run, resolve_device, run_data_dir

METHODS = ("sgd", "rms")
# each method's learning rate, chosen on the val split (docs/suggestions.md, "Dynamic evaluation")
DEFAULT_LRS = {"sgd": 0.03, "rms": 1e-4}
DEFAULT_METHOD, DEFAULT_DECAY = "rms", 0.0
DEFAULT_LR = DEFAULT_LRS[DEFAULT_METHOD]


@dataclass
class EmailMeta:
    """Where an email of a split came from: its sender (normalised address, '' unknown) and date."""

    index: int
    sender: str
    date: float | None  # seconds since the epoch, UTC; None when unknown


def _timestamp(iso: str | None) -> float | None:
    if not iso:
        return None
    try:
        moment = datetime.fromisoformat(iso)
    except ValueError:
        return None
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()


def split_metadata(data_dir: Path, split: str, num_emails: int) -> list[EmailMeta]:
    """Sender and date of each email of `split`, in the split's order (see module doc)."""
    from seqlab.data.mail.clean import CleanOptions
    from seqlab.data.mail.reader import parse_message

    rows = []
    with open(data_dir / "emails.jsonl", encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            if row.get("split") == split:
                rows.append(row)
    if len(rows) != num_emails:
        raise UserError(f"{data_dir / 'emails.jsonl'} lists {len(rows)} {split} emails but the token files "
                        f"hold {num_emails}; prepare the data folder again.")
    out = []
    for i, row in enumerate(rows):
        sender, date = row.get("sender", ""), _timestamp(row.get("date"))
        source = Path(row.get("source", ""))
        if not sender and source.is_file():
            try:
                parsed = parse_message(source.read_bytes(), str(source), CleanOptions())
            except OSError:
                parsed = None
            if parsed is not None and not isinstance(parsed, str):
                sender, date = parsed.sender, _timestamp(parsed.date)
        out.append(EmailMeta(i, sender, date))
    return out


def dynamic_order(meta: Sequence[EmailMeta]) -> list[int]:
    """Indices of the emails grouped by sender (senders by their first date), in date order within each
    sender; undated emails after the dated ones of their sender, in split order."""
    def key(m: EmailMeta) -> tuple[int, float, int]:
        return (m.date is None, m.date if m.date is not None else 0.0, m.index)

    groups: dict[str, list[EmailMeta]] = {}
    for m in meta:
        groups.setdefault(m.sender, []).append(m)
    ordered = [sorted(g, key=key) for g in groups.values()]
    ordered.sort(key=lambda g: (g[0].sender == "", *key(g[0])))
    return [m.index for g in ordered for m in g]


def email_nll(model: nn.Module, ids: torch.Tensor, context: Any = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(per-target NLL (T-1,), the targets) of one email `ids` (T,) = [bos] + tokens + [eos], each target
    scored once: in one pass, or for a model with a window in windows overlapping by half."""
    n = ids.numel() - 1
    limit = context_limit(model) or n
    parts, done = [], 0
    for start in range(0, n, max(1, limit // 2)):
        window = ids[start: start + limit + 1]  # (W + 1,) inputs and their targets
        logits, _ = model(window[None, :-1], context=context)  # (1, W, V)
        nll = torch.nn.functional.cross_entropy(logits[0].float(), window[1:], reduction="none")  # (W,)
        parts.append(nll[done - start:])  # targets not scored by the window before
        done = start + nll.numel()
        if done >= n:
            break
    return torch.cat(parts), ids[1:]


class RMSStep:
    """Krause et al. 2018's RMS-normalised dynamic evaluation (their eq. 8):

        theta <- theta - lr * grad / (sqrt(MS_g) + eps) + decay * (theta_0 - theta) * RMS_norm

    MS_g (per weight) is the mean squared gradient of the loss over a sample of TRAINING emails, as the paper
    takes it from training data; RMS_norm = sqrt(MS_g) / (mean of sqrt(MS_g) over the tensor), so weights
    the training gradients move most also return fastest to the trained theta_0."""

    def __init__(self, model: nn.Module, store: TokenStore, emails: int = 100, decay: float = 0.0,
                 eps: float = 1e-8, seed: int = 0, contexts: bool = False) -> None:
        params = [p for p in model.parameters() if p.requires_grad]
        self.start = [p.detach().clone() for p in params]
        sums = [torch.zeros_like(p) for p in params]
        device = model_device(model)
        picks = np.random.default_rng([seed]).choice(store.num_emails, size=min(emails, store.num_emails),
                                                     replace=False)
        for e in picks:
            ids = torch.as_tensor(store.email(int(e)).astype(np.int64), device=device)
            ctx = (ContextBatch.from_lists([store.contexts.context(int(e), model.cfg.ctx_block_size).tolist()],
                                           device=device) if contexts and store.contexts is not None else None)
            with torch.enable_grad():
                nll, _ = email_nll(model, ids, ctx)
                grads = torch.autograd.grad(nll.mean(), params, allow_unused=True)
            for acc, g in zip(sums, grads):
                if g is not None:
                    acc.add_(g * g)
        rms = [(acc / max(1, len(picks))).sqrt() for acc in sums]  # sqrt(MS_g), per weight
        self.norm = [r / r.mean().clamp_min(eps) for r in rms]  # RMS_norm
        # a weight the sample never moved (the embedding row of a token it lacks) would take a step of
        # lr * g / eps: its denominator is floored at a tenth of its tensor's mean RMS
        self.rms = [r.clamp_min(0.1 * float(r.mean())) for r in rms]
        self.decay, self.eps = decay, eps

    def apply(self, params: Sequence[torch.Tensor], grads: Sequence[torch.Tensor | None], lr: float) -> None:
        for p, g, r, n, p0 in zip(params, grads, self.rms, self.norm, self.start):
            if g is not None:
                p.addcdiv_(g, r + self.eps, value=-lr)
            if self.decay:
                p.add_(self.decay * (p0 - p) * n)


@dataclass
class PassResult:
    """One pass over the split: per-email scores, ExactMatch proposals and typed emails."""

    scores: EmailScores  # per email (an email read twice keeps its last score)
    proposals: list[Proposal]
    typed: list[TypedEmail]
    visits: list[float]  # summed NLL (nats) of each email as it was read, in reading order


def adapt_pass(model: nn.Module, tok: Tokenizer, store: TokenStore, order: Sequence[int], lr: float, *,
               exact_texts: dict[int, str], positions: dict[int, list[int]], typed_texts: dict[int, str],
               saved_words: int = 50, max_words: int = 5, typed_max_words: int = 3,
               contexts: bool = False, step: RMSStep | None = None, ask: str = DEFAULT_ASK) -> PassResult:
    """Read the split in `order`, scoring, proposing and then stepping on each email (module doc).
    `exact_texts`/`positions`: email -> text and ExactMatch offsets; `typed_texts`: email -> text typed."""
    device = model_device(model)
    nbytes = token_byte_lengths(tok)
    n = store.num_emails
    scores = EmailScores(np.zeros(n), np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64),
                         np.zeros(n, dtype=bool))
    proposals: dict[int, list[Proposal]] = {}
    typed: dict[int, TypedEmail] = {}
    params = [p for p in model.parameters() if p.requires_grad]
    visits: list[float] = []
    for e in order:
        ids = torch.as_tensor(store.email(e).astype(np.int64), device=device)
        ctx = None
        if contexts and store.contexts is not None:
            ctx = ContextBatch.from_lists([store.contexts.context(e, model.cfg.ctx_block_size).tolist()],
                                          device=device)
        with torch.enable_grad():
            nll, targets = email_nll(model, ids, ctx)
            loss = nll.mean()
        scores.nll[e] = float(nll.detach().double().sum())
        visits.append(float(scores.nll[e]))
        scores.tokens[e] = targets.numel()
        scores.bytes[e] = int(nbytes[targets.cpu()].sum())
        scores.has_context[e] = ctx is not None and bool(ctx.keep.any())

        def propose(prefix: str, words: int = max_words, c: Any = ctx) -> Any:
            return complete(model, tok, prefix, max_words=words, temperature=0.0, context=c, rule=FIRST_WORD)

        if e in exact_texts:
            text = exact_texts[e]
            proposals[e] = []
            for i in positions.get(e, []):
                c = propose(text[:i])
                proposals[e].append(Proposal(e, i, split_words(text[i:].split("\n", 1)[0])[:max_words],
                                             c.words[:max_words], c.confidence if c.words else 0.0,
                                             c.word_confidences[:max_words]))
        if e in typed_texts:
            # every asked position of the email at once (prefix reuse and lanes), as `complete` would answer
            typed[e] = collect_typing([typed_texts[e]], model_proposer(model, tok, max_words=typed_max_words),
                                      words=saved_words, contexts=[ctx], ask=ask)[0]
        if lr > 0:
            grads = torch.autograd.grad(loss, params, allow_unused=True)
            with torch.no_grad():
                if step is None:
                    for p, g in zip(params, grads):
                        if g is not None:
                            p.add_(g, alpha=-lr)  # Krause et al. 2018, eq. 4: plain SGD on the segment's loss
                else:
                    step.apply(params, grads, lr)
    # proposals in email order, as the frozen evaluation collects them
    return PassResult(scores, [p for e in sorted(proposals) for p in proposals[e]],
                      [typed[e] for e in sorted(typed)], visits)


def _summary(result: PassResult, coverage: float, gate: tuple[str, float | None]) -> dict[str, Any]:
    s = result.scores
    nll, tokens = float(s.nll.sum()), int(s.tokens.sum())
    row: dict[str, Any] = {"bpb": s.bpb(), "loss": nll / max(1, tokens), "tokens": tokens, "bytes": int(s.bytes.sum())}
    if result.proposals:
        row["at_coverage"] = coverage_table(result.proposals, (coverage,))[0]
    if result.typed:
        row["saved_chars"] = score_typing(result.typed, *gate)
    return row


def dynamic_eval(run_dir: Path | str, options: EvalOptions | None = None, device: str = "auto", *,
                 seed: int = 0, max_words: int = 5, decay: float = DEFAULT_DECAY,
                 ms_emails: int = 100) -> dict[str, Any]:
    """Frozen against dynamic evaluation of RUN_DIR on `options.split` (module doc), with `dynamic_method`
    at `dynamic_lr` (default the method's): for each, bits per byte, ExactMatch at `coverage` (default 0.2;
    `completion_emails` emails, as `seqlab eval` picks them) and saved characters (with `saved`, its typed
    emails at `rule`/`saved_threshold` as `seqlab eval` resolves them, asked where `ask` says); "bpb_diff":
    frozen minus dynamic bits per byte with a paired bootstrap interval over emails; "order": how many
    emails had a sender and a date."""
    o = options or EvalOptions()
    split, method, coverage = o.split, o.dynamic_method, o.coverage or 0.2
    lr = DEFAULT_LRS[method] if o.dynamic_lr is None else o.dynamic_lr
    saved_emails = o.typed_emails if o.saved else 0
    if not 0.0 <= decay <= 1.0:
        raise UserError(f"the decay towards the trained weights must be in [0, 1], not {decay}.")
    run_dir = Path(run_dir)
    gate = served_gate(run_dir, o.rule, o.saved_threshold)
    model, tok, cfg = load_run(run_dir, resolve_device(device))  # a fresh copy: the run on disk is only read
    model.eval()
    data = run_data_dir(run_dir, o.data)
    check_same_tokenizer(tok, data, run_dir)
    store = TokenStore(data, split)
    meta = split_metadata(data, split, store.num_emails)
    order = dynamic_order(meta)
    exact_picks = [int(i) for i in completion_picks(store, o.completion_emails, seed)]
    exact_texts = {e: tok.decode(store.email(e).tolist()) for e in exact_picks}
    positions: dict[int, list[int]] = {}
    for k, i in sample_positions([exact_texts[e] for e in exact_picks], o.positions_per_email, seed):
        positions.setdefault(exact_picks[k], []).append(i)
    typed_picks = completion_picks(store, saved_emails, seed) if saved_emails > 0 else []
    typed_texts = {int(e): tok.decode(store.email(int(e)).tolist()) for e in typed_picks}
    reads = bool(getattr(cfg.model, "reads_context", False))
    initial = {k: v.detach().clone() for k, v in model.state_dict().items()}
    step = (RMSStep(model, TokenStore(data, "train"), ms_emails, decay, seed=seed, contexts=reads)
            if method == "rms" and lr > 0 else None)
    passes = {}
    for name, rate in (("frozen", 0.0), ("dynamic", lr)):
        model.load_state_dict(initial)
        passes[name] = adapt_pass(model, tok, store, order, rate, exact_texts=exact_texts, positions=positions,
                                  typed_texts=typed_texts, saved_words=o.saved_words, max_words=max_words,
                                  contexts=reads, step=step, ask=o.ask)
    model.load_state_dict(initial)
    diff = paired_bootstrap(passes["frozen"].scores, passes["dynamic"].scores, seed=seed)
    return {"split": split, "lr": lr, "method": method, "decay": decay, "rule": gate[0], "threshold": gate[1],
            "coverage": coverage, "ask": o.ask,
            "emails": store.num_emails, "order": {"senders": len({m.sender for m in meta if m.sender}),
                                                   "with_sender": sum(bool(m.sender) for m in meta),
                                                   "dated": sum(m.date is not None for m in meta)},
            "frozen": _summary(passes["frozen"], coverage, gate),
            "dynamic": _summary(passes["dynamic"], coverage, gate),
            "bpb_diff": diff}


def format_dynamic(result: dict[str, Any]) -> list[str]:
    """Frozen against dynamic: bits per byte, ExactMatch@1/@3 at the coverage, saved characters."""
    def pct(x: float | None) -> str:
        return "    -" if x is None else f"{100 * x:5.1f}%"

    def em(row: dict[str, Any], n: str) -> str:
        at = row.get("at_coverage")
        if not at:
            return "-"
        ci = at["exact_match_ci95"].get(n)
        return pct(at["exact_match"].get(n)) + (f" [{100 * ci[0]:.0f}-{100 * ci[1]:.0f}]" if ci else "")

    def saved(row: dict[str, Any]) -> str:
        s = row.get("saved_chars")
        if not s:
            return "-"
        ci = s.get("saved_ci95")
        return pct(s["saved"]) + (f" [{100 * ci[0]:.1f}-{100 * ci[1]:.1f}]" if ci else "")

    d, o = result["bpb_diff"], result["order"]
    lines = [f"  dynamic evaluation ({result['method']} step, lr {result['lr']:g}, after each email; "
             f"{o['with_sender']} of "
             f"{result['emails']} emails with a sender, {o['senders']} senders, {o['dated']} dated):",
             f"    {'':8} {'bits/byte':>9} {'EM@1 at ' + format(100 * result['coverage'], 'g') + '%':>18} "
             f"{'EM@3':>18} {'saved chars':>20}"]
    for name in ("frozen", "dynamic"):
        r = result[name]
        lines.append(f"    {name:8} {r['bpb']:9.3f} {em(r, '1'):>18} {em(r, '3'):>18} {saved(r):>20}")
    lines.append(f"    frozen - dynamic bits per byte: {d['diff']:.4f} [{d['low']:.4f}, {d['high']:.4f}] "
                 f"(95% paired bootstrap over {d['emails']} emails)")
    return lines
