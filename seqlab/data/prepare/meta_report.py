"""The last word of `prepare`: meta.json (what the DATA_DIR holds and how it was made, `build_meta`) and the
corpus report `seqlab prepare` prints from it (`format_report`).

meta.json is a function of the input and the config only (no timings, no worker count), so the same input
and seed give byte-identical files. Keys added over time appear only when they say something, so an older
folder's meta.json stays as it was: `split_by` only for a date split, the sender filters only when set,
`tokenizer.from` only for a reused tokenizer.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from seqlab.data.layout import SPLITS
from seqlab.data.prepare.options import PrepareConfig
from seqlab.data.prepare.read_mail import SpooledMail
from seqlab.data.prepare.threadtable import MIN_HELD_EMAILS
from seqlab.data.tokenizer import Tokenizer
from seqlab.version import __version__

__all__ = ["MIN_ADAPT_EMAILS", "build_meta", "format_report", "format_update", "nothing_kept"]

MIN_ADAPT_EMAILS = 50  # train emails below which the report says there is too little to adapt on


def build_meta(config: PrepareConfig, mail: SpooledMail, counts: dict[str, dict[str, int]], tok: Tokenizer,
               dtype: str, contexts: dict[str, Any], reused_from: Path | None) -> dict[str, Any]:
    """meta.json's content (ARCHITECTURE.md, "DATA_DIR")."""
    opts = config.clean
    meta: dict[str, Any] = {
        "seqlab_version": __version__,
        "source": config.source,
        "seed": config.seed,
        "split_fractions": list(config.split),
        "clean": {"keep_quotes": opts.keep_quotes, "keep_signatures": opts.keep_signatures, "mask_pii": opts.mask_pii,
                  **({"senders": sorted(opts.senders)} if opts.senders else {}),
                  **({"exclude_senders": sorted(opts.exclude_senders)} if opts.exclude_senders else {})},
        "seen": mail.report.seen,
        "kept": sum(c["emails"] for c in counts.values()),
        "skipped": dict(sorted(mail.report.skipped.items())),
        "duplicates": mail.duplicates,
        "splits": counts,
        "tokenizer": {"kind": tok.kind, "vocab_size": tok.vocab_size, "sha256": tok.sha256(),
                      "bos_id": tok.bos_id, "eos_id": tok.eos_id, "pad_id": tok.pad_id},
        "token_dtype": dtype,
        "contexts": contexts,
        "prepare": config.as_meta(),
    }
    if config.split_by == "date":
        meta["split_by"] = "date"
    if reused_from is not None:
        meta["tokenizer"]["from"] = str(reused_from)
    return meta


def nothing_kept(config: PrepareConfig, mail: SpooledMail) -> str:
    """The error when no email is left: how many were seen and why each was skipped (a --sender that
    matched nobody says so)."""
    report = mail.report
    why = ", ".join(f"{reason} {n}" for reason, n in report.skipped.most_common())
    text = (f"no usable email was found in {config.source} ({report.seen} messages seen"
            f"{'; skipped: ' + why if why else ''})")
    if config.clean.senders and report.skipped["other_sender"]:
        text += f"; no kept message is From {', '.join(sorted(config.clean.senders))}"
    return text


def format_report(meta: dict) -> str:
    """The corpus report printed by `seqlab prepare`: emails per split, skips by reason, duplicates, tokens."""
    lines = [f"source: {meta['source']}   seed: {meta['seed']}   tokenizer: {meta['tokenizer']['kind']} "
             f"(vocab {meta['tokenizer']['vocab_size']})",
             f"messages seen: {meta['seen']}   kept: {meta['kept']}",
             "", f"{'split':<6} {'emails':>8} {'threads':>8} {'tokens':>11} {'bytes':>12}"]
    for s in SPLITS:
        c = meta["splits"][s]
        lines.append(f"{s:<6} {c['emails']:>8} {c['threads']:>8} {c['tokens']:>11} {c['bytes']:>12}")
    dup = meta["duplicates"]
    lines += ["", f"duplicates removed: {sum(dup.values())} "
                  f"(exact {dup.get('duplicate', 0)}, same body {dup.get('duplicate_body', 0)}"
                  + (f", already in the folder {dup['held']}" if dup.get("held") else "") + ")"]
    skipped = meta["skipped"]
    total = sum(skipped.values())
    reasons = ", ".join(f"{k} {v}" for k, v in skipped.items())
    lines.append(f"skipped: {total}" + (f" ({reasons})" if total else ""))
    if meta.get("split_by") == "date":
        lines.append("split by date: the earliest threads train, the latest are held out")
        train, val = meta["splits"]["train"], meta["splits"]["val"]
        if train["emails"] < MIN_ADAPT_EMAILS or val["emails"] < MIN_HELD_EMAILS:
            lines.append(f"note: {train['emails']} train and {val['emails']} validation emails are too few to adapt "
                         f"a model on (about {MIN_ADAPT_EMAILS} and {MIN_HELD_EMAILS} at least); `train --init` will "
                         "move little and choose its step from noise, and `serve --learn` may serve you better")
    return "\n".join(lines)


def format_update(meta: dict[str, Any]) -> str:
    """What the last `prepare --update` added (meta.json's `update`, `grow.py`), as it prints it."""
    u = meta["update"]
    skipped = sum(u["skipped"].values())
    head = (f"update from {u['source']}: {u['seen']} messages read, {u['held']} already in the folder, "
            f"{u['duplicates']} duplicates, {skipped} skipped")
    if not u["added"]:
        return head + "\nnothing new: added nothing, the token files are as they were"
    lines = [head, f"added {u['added']} emails:", f"{'split':<6} {'emails':>8} {'new threads':>12} {'tokens':>11}"]
    for s in SPLITS:
        c = u["splits"][s]
        lines.append(f"{s:<6} {c['emails']:>8} {c['new_threads']:>12} {c['tokens']:>11}")
    if u["threads_across_splits"]:
        lines.append(f"note: {u['threads_across_splits']} new threads touch old threads of two splits; each went "
                     "to the first of them")
    return "\n".join(lines)

