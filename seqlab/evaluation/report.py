"""What `seqlab eval` and `seqlab tradeoff` report of a trained RUN_DIR on a split of its DATA_DIR (`evaluate_run`,
`tradeoff_run`) and their tables (`format_eval`, `format_best`).

One result gathers the model's held-out loss, perplexity and bits per byte over every target of the
split (`seqlab.evaluation.heldout`), classical compressors on the same bytes
(`seqlab.evaluation.compressors`) and word-completion quality (`seqlab.evaluation.exact_match`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from seqlab.data.store import TokenStore
from seqlab.data.tokenizer import Tokenizer
from seqlab.evaluation.calibration import served_gate
from seqlab.evaluation.compressors import compressor_bpb_bytes, split_bytes
from seqlab.evaluation.context_scores import by_context, email_scores, totals
from seqlab.evaluation.exact_match import completion_quality
from seqlab.evaluation.heldout import EVAL_BATCH, evaluate_lm
from seqlab.evaluation.saved_chars import RULES, best_threshold, saved_report, tradeoff_curve, type_emails
from seqlab.evaluation.scored_emails import check_same_tokenizer, completion_contexts, completion_texts
from seqlab.generation.phrases import PhraseModel
from seqlab.options import EvalOptions, TradeoffOptions
from seqlab.runs.load import load_run, resolve_device, run_data_dir
from seqlab.runs.precision import autocast_for, resolve_precision


def evaluate_run(run_dir: Path | str, options: EvalOptions | None = None, device: str = "auto", *,
                 phrase_model: PhraseModel | None = None, max_words: int = 5, batch_size: int = EVAL_BATCH,
                 seed: int = 0) -> dict[str, Any]:
    """Evaluate RUN_DIR's best checkpoint on `options.split` of its DATA_DIR (or `options.data`); one flat
    JSON-able dict (`EvalOptions` says what each option means).

    Keys: split, loss, ppl, bpb, tokens, bytes, compressor_bpb {gzip, bz2, xz}, params, mixer,
    run_dir, data_dir, emails; with `completions`: exact_match {"1".."max_words"}, coverage, threshold,
    completion_positions, by_coverage (one entry per coverage of `coverages`: target, threshold, coverage,
    exact_match, exact_match_counts, exact_match_ci95 (Wilson), ...), and with `coverage` also
    at_coverage {the same keys}. Completions are scored at up to `positions_per_email` word boundaries of
    each of up to `completion_emails` emails drawn with `seed`; with `phrase_model`, blended with that phrase
    model (`seqlab.generation.phrases`), and the loss and bits per byte stay the model's own.

    With `completions` and `saved`, also `saved_chars` (`seqlab.evaluation.saved_chars`): `typed_emails`
    emails (drawn as above) typed for their first `saved_words` words, the share of characters accepted
    suggestions save and the wrong suggestions shown per 100 words, at `rule` and `saved_threshold` (default:
    the run's calibration.json, else the default rule with no threshold) under "at", and under "best" each rule
    at its best threshold on this split with at most `max_wrong_per_100`; suggestions asked where `ask` says.
    """
    o = options or EvalOptions()
    gate = served_gate(run_dir, o.rule, o.saved_threshold)
    run_dir = Path(run_dir)
    dev = resolve_device(device)
    model, tok, cfg = load_run(run_dir, dev)
    # the held-out pass in the number format the run trained in (runs/precision.py), unless told otherwise
    numbers = resolve_precision(cfg.train.precision if o.precision == "run" else o.precision, dev)
    data = run_data_dir(run_dir, o.data)
    check_same_tokenizer(tok, data, run_dir)
    store = TokenStore(data, o.split)
    result = _heldout(model, tok, cfg, store, batch_size, dev, numbers,
                      where={"run_dir": str(run_dir), "data_dir": str(data)})
    if o.completions:
        texts = completion_texts(store, tok, o.completion_emails, seed)
        quality = completion_quality(model, tok, texts, max_words=max_words, threshold=o.threshold,
                                     positions_per_email=o.positions_per_email, seed=seed,
                                     target_coverage=o.coverage or None, coverages=o.coverages,
                                     phrases=phrase_model,
                                     contexts=completion_contexts(model, store, o.completion_emails, seed))
        result.update(_completion_keys(quality, len(texts), phrase_model))
    if o.completions and o.saved:
        n = o.typed_emails
        typed = type_emails(model, tok, completion_texts(store, tok, n, seed), words=o.saved_words,
                            phrases=phrase_model, contexts=completion_contexts(model, store, n, seed), ask=o.ask)
        result["saved_chars"] = {**saved_report(typed, *gate, o.max_wrong_per_100),
                                 "words_per_email": o.saved_words, "ask": o.ask}
    return result


def tradeoff_run(run_dir: Path, model: Any, tok: Tokenizer, options: TradeoffOptions) -> dict[str, Any]:
    """The trade-off curve of the suggestion rules (`Run.tradeoff`) for RUN_DIR's loaded `model`: `emails`
    held-out emails typed for `words` words, the saved share and wrong suggestions per 100 words at each rule
    and threshold ("curve"), and each rule's best threshold within `max_wrong_per_100` ("best")."""
    o = options
    folder = run_data_dir(run_dir, o.data)
    check_same_tokenizer(tok, folder, run_dir)
    store = TokenStore(folder, o.split)
    typed = type_emails(model, tok, completion_texts(store, tok, o.emails, 0), words=o.words, max_words=o.max_words,
                        contexts=completion_contexts(model, store, o.emails, 0), ask=o.ask, mid_word=o.mid_word)
    return {"split": o.split, "emails": len(typed), "words_per_email": o.words, "max_words": o.max_words,
            "ask": o.ask, "mid_word": o.mid_word,
            "max_wrong_per_100": o.max_wrong_per_100, "curve": tradeoff_curve(typed),
            "best": [best_threshold(typed, r, o.max_wrong_per_100) for r in RULES], "run_dir": str(run_dir)}


def _heldout(model: Any, tok: Tokenizer, cfg: Any, store: TokenStore, batch_size: int, dev: Any,
             numbers: str, where: dict[str, str]) -> dict[str, Any]:
    """The held-out keys of `evaluate_run`: loss, bits per byte, the compressors on the same bytes, `where`
    (the run and data folders), and, when the split has contexts, the emails with and without one apart
    (scored per email)."""
    autocast = autocast_for(numbers, dev)
    scores = None
    if store.contexts is not None:
        scores = email_scores(model, store, cfg.model.block_size, batch_size, dev, tok, autocast=autocast)
        lm = totals(scores)
    else:
        lm = evaluate_lm(model, store, cfg.model.block_size, batch_size, dev, tok, autocast=autocast)
    result: dict[str, Any] = {
        "split": store.split, "loss": lm["loss"], "ppl": lm["ppl"], "bpb": lm["bpb"], "tokens": lm["tokens"],
        "bytes": lm["bytes"], "compressor_bpb": compressor_bpb_bytes(split_bytes(store, tok)),
        "params": sum(p.numel() for p in model.parameters()), "mixer": cfg.model.mixer,
        **where, "emails": store.num_emails, "precision": numbers,
    }
    if scores is not None:
        result["by_context"] = by_context(scores)
    return result


def _completion_keys(quality: dict[str, Any], emails: int, phrases: PhraseModel | None) -> dict[str, Any]:
    """The completion keys of `evaluate_run` from a `completion_quality` result."""
    keys = dict(exact_match=quality["exact_match"], coverage=quality["coverage"], threshold=quality["threshold"],
                completion_positions=quality["positions"], exact_match_ci95=quality["exact_match_ci95"],
                completion_emails=emails, phrases=phrases.meta if phrases is not None else None)
    for key in ("at_coverage", "by_coverage", "by_coverage_phrase"):
        if key in quality:
            keys[key] = quality[key]
    return keys


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
            + f"  shown {r['shown']}, accepted {r['accepted']}"
            + (f", typed through {r['typed_through']} chars" if "typed_through" in r else "")
            + _sources(r))


def _sources(r: dict[str, Any]) -> str:
    """"  from model 80%, memory 20%" when some characters were saved by a source other than the model."""
    shares = r.get("saved_by_source") or {}
    if set(shares) <= {"model"}:
        return ""
    return "  from " + ", ".join(f"{s} {100 * v:.0f}%" for s, v in shares.items())


def format_best(rows: list[dict[str, Any]]) -> list[str]:
    """Each rule's best threshold within the cap (`best_threshold` rows)."""
    return [saved_line(f"best on this split, <= {r['max_wrong_per_100']:g} wrong/100: {_gate(r)}", r) for r in rows]


def format_saved(saved: dict[str, Any]) -> list[str]:
    """Saved characters at the served rule and at each rule's best threshold, with 95% bootstrap intervals."""
    at = saved["at"]
    asked = {"every-letter": "every letter", "word-starts": "word starts"}.get(saved.get("ask", "word-starts"))
    return [f"  saved characters, {at['emails']} emails typed for up to {saved['words_per_email']} words "
            f"({at['chars']:,} characters, {at['words']:,} words), suggestions asked at {asked} "
            f"(95% bootstrap intervals over emails):",
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
