"""Evaluation of a trained RUN_DIR on a split of its DATA_DIR (`evaluate_run`) and its table (`format_eval`).

One result gathers the model's held-out loss, perplexity and bits per byte over every target of the
split (`seqlab.evaluation.heldout`), classical compressors on the same bytes
(`seqlab.evaluation.compressors`) and word-completion quality (`seqlab.evaluation.exact_match`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from seqlab.data.store import TokenStore
from seqlab.data.tokenizer import Tokenizer, load_tokenizer
from seqlab.errors import UserError
from seqlab.evaluation.compressors import compressor_bpb_bytes, split_bytes, split_texts
from seqlab.evaluation.context_scores import by_context, email_scores, totals
from seqlab.evaluation.exact_match import COVERAGES, completion_quality
from seqlab.evaluation.heldout import EVAL_BATCH, evaluate_lm
from seqlab.evaluation.saved_chars import MAX_WRONG_PER_100, saved_report, type_emails
from seqlab.generation.gate import DEFAULT_RULE, FIRST_WORD, check_rule
from seqlab.generation.phrases import PhraseModel
from seqlab.models.context_encoder import ContextBatch
from seqlab.runs.load import load_run, resolve_device, run_data_dir
from seqlab.runs.precision import autocast_for, resolve_precision


def check_same_tokenizer(tok: Tokenizer, data_dir: Path, run_dir: Path) -> None:
    """The run must have been trained on ids from this DATA_DIR's tokenizer, or the numbers are noise."""
    data_tok = load_tokenizer(data_dir / "tokenizer.json")
    if data_tok.sha256() != tok.sha256():
        raise UserError(f"{run_dir} was trained with a different tokenizer than {data_dir / 'tokenizer.json'}; "
                        f"evaluate it on the data folder it was trained on.")


def completion_picks(store: TokenStore, emails: int, seed: int) -> np.ndarray:
    """Indices of up to `emails` emails of the split, drawn with `seed`: the emails completions are scored on."""
    rng = np.random.default_rng([seed])
    return np.sort(rng.choice(store.num_emails, size=min(emails, store.num_emails), replace=False))


def completion_texts(store: TokenStore, tok: Tokenizer, emails: int, seed: int) -> list[str]:
    """Texts of the emails of `completion_picks`.

    `seqlab eval` and `seqlab calibrate` share it, so the same seed and count score the same emails.
    """
    return split_texts(store, tok, completion_picks(store, emails, seed))


def completion_contexts(model: Any, store: TokenStore, emails: int, seed: int) -> list[Any] | None:
    """The contexts of the emails of `completion_picks` for a model that reads them, else None."""
    if not getattr(model.cfg, "reads_context", False) or store.contexts is None:
        return None
    limit = model.cfg.ctx_block_size
    return [ContextBatch.from_lists([store.contexts.context(int(i), limit).tolist()])
            for i in completion_picks(store, emails, seed)]


def evaluate_run(
    run_dir: Path | str, data_dir: Path | str | None = None, split: str = "val", device: str = "auto", *,
    completion_threshold: float = 0.0, target_coverage: float | None = None, completion_emails: int = 200,
    positions_per_email: int = 5, max_words: int = 5, batch_size: int = EVAL_BATCH, seed: int = 0,
    completions: bool = True, coverages: Sequence[float] = COVERAGES, phrases: PhraseModel | None = None,
    precision: str = "run", saved: bool = True, saved_emails: int | None = None, saved_words: int = 50,
    rule: str | None = None, threshold: float | None = None, max_wrong_per_100: float = MAX_WRONG_PER_100,
) -> dict[str, Any]:
    """Evaluate RUN_DIR's best checkpoint on a split of its DATA_DIR; one flat JSON-able dict.

    Keys: split, loss, ppl, bpb, tokens, bytes, compressor_bpb {gzip, bz2, xz}, params, mixer,
    run_dir, data_dir, emails; with `completions`: exact_match {"1".."max_words"}, coverage, threshold,
    completion_positions, by_coverage (one entry per coverage of `coverages`: target, threshold, coverage,
    exact_match, exact_match_counts, exact_match_ci95 (Wilson), ...), and with `target_coverage` also
    at_coverage {the same keys}. Completions are scored at up to `positions_per_email` word boundaries of
    each of up to `completion_emails` emails drawn with `seed`; with `phrases`, blended with that phrase
    model (`seqlab.generation.phrases`), and the loss and bits per byte stay the model's own.

    With `completions` and `saved`, also `saved_chars` (`seqlab.evaluation.saved_chars`): up to
    `saved_emails` emails (default the smaller of 100 and `completion_emails`; drawn as above) typed for
    their first `saved_words` words, the share of
    characters accepted suggestions save and the wrong suggestions shown per 100 words, at `rule` and
    `threshold` (default: the run's calibration.json, else the default rule with no threshold) under "at",
    and under "best" each rule at its best threshold on this split with at most `max_wrong_per_100`.
    """
    if split not in ("train", "val", "test"):
        raise UserError(f"split must be train, val or test, not {split!r}.")
    if not 0.0 <= completion_threshold <= 1.0:
        raise UserError(f"the completion threshold must be in [0, 1], not {completion_threshold}.")
    for c in [*coverages, *([target_coverage] if target_coverage is not None else [])]:
        if not 0.0 < c <= 1.0:
            raise UserError(f"a target coverage must be in (0, 1], not {c}.")
    if saved_emails is None:
        saved_emails = min(100, completion_emails)  # typing costs a proposal per word: fewer emails suffice
    if completion_emails < 1 or positions_per_email < 1 or saved_emails < 1 or saved_words < 1:
        raise UserError("the completion emails, positions per email, emails and words typed must be at least 1.")
    gate = served_gate(run_dir, rule, threshold)
    if not max_wrong_per_100 >= 0:
        raise UserError(f"the cap on wrong suggestions per 100 words must be 0 or more, not {max_wrong_per_100}.")
    run_dir = Path(run_dir)
    dev = resolve_device(device)
    model, tok, cfg = load_run(run_dir, dev)
    # the held-out pass in the number format the run trained in (runs/precision.py), unless told otherwise
    numbers = resolve_precision(cfg.train.precision if precision == "run" else precision, dev)
    autocast = autocast_for(numbers, dev)
    data = run_data_dir(run_dir, data_dir)
    check_same_tokenizer(tok, data, run_dir)
    store = TokenStore(data, split)
    scores = None
    if store.contexts is not None:  # per email, so that emails with and without a context are reported apart
        scores = email_scores(model, store, cfg.model.block_size, batch_size, dev, tok, autocast=autocast)
        lm = totals(scores)
    else:
        lm = evaluate_lm(model, store, cfg.model.block_size, batch_size, dev, tok, autocast=autocast)
    raw = split_bytes(store, tok)
    result: dict[str, Any] = {
        "split": split, "loss": lm["loss"], "ppl": lm["ppl"], "bpb": lm["bpb"], "tokens": lm["tokens"],
        "bytes": lm["bytes"], "compressor_bpb": compressor_bpb_bytes(raw),
        "params": sum(p.numel() for p in model.parameters()), "mixer": cfg.model.mixer,
        "run_dir": str(run_dir), "data_dir": str(data), "emails": store.num_emails, "precision": numbers,
    }
    if scores is not None:
        result["by_context"] = by_context(scores)
    if completions:
        texts = completion_texts(store, tok, completion_emails, seed)
        quality = completion_quality(model, tok, texts, max_words=max_words,
                                     threshold=completion_threshold, positions_per_email=positions_per_email,
                                     seed=seed, target_coverage=target_coverage, coverages=coverages,
                                     phrases=phrases,
                                     contexts=completion_contexts(model, store, completion_emails, seed))
        result.update(exact_match=quality["exact_match"], coverage=quality["coverage"],
                      threshold=quality["threshold"], completion_positions=quality["positions"],
                      exact_match_ci95=quality["exact_match_ci95"], completion_emails=len(texts),
                      phrases=phrases.meta if phrases is not None else None)
        for key in ("at_coverage", "by_coverage", "by_coverage_phrase"):
            if key in quality:
                result[key] = quality[key]
    if completions and saved:
        typed = type_emails(model, tok, completion_texts(store, tok, saved_emails, seed), words=saved_words,
                            phrases=phrases, contexts=completion_contexts(model, store, saved_emails, seed))
        result["saved_chars"] = {**saved_report(typed, *gate, max_wrong_per_100), "words_per_email": saved_words}
    return result


def served_gate(run_dir: Path | str, rule: str | None, threshold: float | None) -> tuple[str, float | None]:
    """The rule and threshold suggestions are shown at: the given ones, else the run's calibration.json,
    else the default rule with no threshold. A bad pair is a `UserError`."""
    from seqlab.evaluation.calibration import load_calibration  # it imports this module

    if rule is None and threshold is None:
        calibration = load_calibration(run_dir)
        if calibration is not None:
            return calibration.get("rule", FIRST_WORD), float(calibration["threshold"])
    rule = rule or DEFAULT_RULE
    try:
        check_rule(rule, threshold)
    except ValueError as exc:
        raise UserError(f"{exc}.") from None
    return rule, threshold


def _pct(x: float | None) -> str:
    return "    -" if x is None else f"{100 * x:5.1f}%"


def format_eval(result: dict[str, Any]) -> str:
    """A small human-readable table of an `evaluate_run` result."""
    lines = [
        f"{result['split']} split: {result['tokens']:,} target tokens, {result['bytes']:,} bytes"
        + (f", {result['emails']:,} emails" if "emails" in result else ""),
        f"  {'':10} {'bits/byte':>9} {'loss/token':>10} {'perplexity':>10}",
        f"  {'model':10} {result['bpb']:9.3f} {result['loss']:10.3f} {result['ppl']:10.2f}"
        + (f"   ({result['params']:,} parameters)" if "params" in result else "")
        + (f", {result['precision']}" if "precision" in result else ""),
    ]
    for name, label in (("gzip", "gzip -9"), ("bz2", "bz2 -9"), ("xz", "xz -9e")):
        lines.append(f"  {label:10} {result['compressor_bpb'][name]:9.3f}")
    for name, label in (("with_context", "replies (with the message answered)"),
                        ("without_context", "emails without context")):
        if "by_context" in result:
            g = result["by_context"][name]
            lines.append(f"  model on {label}: {g['bpb']:.3f} bits/byte over {g['emails']:,} emails")
    blocks = []
    if "exact_match" in result:
        blocks.append((f"threshold {result['threshold']:.3f}", result["coverage"], result["exact_match"]))
    if "at_coverage" in result:
        at = result["at_coverage"]
        blocks.append((f"threshold {at['threshold']:.3f} (target coverage {100 * at['target']:.0f}%)",
                       at["coverage"], at["exact_match"]))
    if blocks:
        lines.append(f"  completions at {result.get('completion_positions', 0)} word boundaries"
                     + (" (with the phrase model)" if result.get("phrases") else "") + ":")
        for label, coverage, exact in blocks:
            em = "  ".join(f"EM@{n} {_pct(v)}" for n, v in exact.items())
            lines.append(f"    {label}: coverage {_pct(coverage)}  {em}")
    if result.get("by_coverage"):
        lines += format_coverage_table(result["by_coverage"])
    if result.get("by_coverage_phrase"):
        lines += format_phrase_table(result["by_coverage_phrase"])
    if result.get("saved_chars"):
        lines += format_saved(result["saved_chars"])
    return "\n".join(lines)


def _gate(row: dict[str, Any]) -> str:
    t = row["threshold"]
    return f"{row['rule']} " + ("(no threshold)" if t is None else f">= {t:.3g}"
                                + (" chars" if row["rule"] == "expected-chars" else ""))


def saved_line(label: str, r: dict[str, Any]) -> str:
    """One `score_typing` row: saved share and wrong suggestions per 100 words with their intervals."""
    s_ci, w_ci = r.get("saved_ci95"), r.get("wrong_per_100_words_ci95")
    return (f"    {label:<44} saved {_pct(r['saved'])}"
            + (f" [{100 * s_ci[0]:.1f}-{100 * s_ci[1]:.1f}]" if s_ci else "")
            + f"  wrong/100 words {r['wrong_per_100_words'] or 0:5.2f}"
            + (f" [{w_ci[0]:.2f}-{w_ci[1]:.2f}]" if w_ci else "")
            + f"  shown {r['shown']}, accepted {r['accepted']}")


def format_best(rows: list[dict[str, Any]]) -> list[str]:
    """Each rule's best threshold within the cap (`best_threshold` rows)."""
    return [saved_line(f"best on this split, <= {r['max_wrong_per_100']:g} wrong/100: {_gate(r)}", r) for r in rows]


def format_saved(saved: dict[str, Any]) -> list[str]:
    """Saved characters at the served rule and at each rule's best threshold, with 95% bootstrap intervals."""
    at = saved["at"]
    return [f"  saved characters, {at['emails']} emails typed for up to {saved['words_per_email']} words "
            f"({at['chars']:,} characters, {at['words']:,} words; 95% bootstrap intervals over emails):",
            saved_line(f"served: {_gate(at)}", at), *format_best(saved["best"])]


def _ci(row: dict[str, Any], n: str) -> str:
    ci = (row.get("exact_match_ci95") or {}).get(n)
    return f"[{100 * ci[0]:.0f}-{100 * ci[1]:.0f}]" if ci else ""


def format_coverage_table(rows: list[dict[str, Any]]) -> list[str]:
    """ExactMatch@N at each target coverage with its threshold, positions shown and 95% Wilson intervals."""
    ns = list(rows[0]["exact_match"])
    head = (f"    {'target':>6} {'coverage':>8} {'threshold':>9} {'shown':>6} "
            + " ".join(f"{'EM@' + n:>15}" for n in ns))
    lines = ["  ExactMatch at each coverage (95% Wilson interval in brackets):", head]
    for r in rows:
        cells = " ".join(f"{_pct(r['exact_match'][n]) + ' ' + _ci(r, n):>15}" for n in ns)
        lines.append(f"    {100 * r['target']:>5.0f}% {_pct(r['coverage']):>8} {r['threshold']:9.4f} {r['shown']:>6} "
                     f"{cells}")
    return lines


def format_phrase_table(rows: list[dict[str, Any]]) -> list[str]:
    """`phrase_coverage_table` rows: ExactMatch@N when N words are shown only if the N-word phrase is sure
    enough, with the positions shown for each N (its own threshold) and 95% Wilson intervals."""
    ns = list(rows[0]["exact_match"])
    lines = ["  ExactMatch@N when an N-word suggestion is shown only if all N words are sure enough",
             "  (one threshold per N; shown positions in parentheses):",
             f"    {'target':>6} " + " ".join(f"{'EM@' + n:>21}" for n in ns)]
    for r in rows:
        cells = " ".join(f"{_pct(r['exact_match'][n]) + ' ' + _ci(r, n) + ' (' + str(r['shown'][n]) + ')':>21}"
                         for n in ns)
        lines.append(f"    {100 * r['target']:>5.0f}% {cells}")
    return lines
