"""`seqlab prepare`: one streaming pass from a mail source to a DATA_DIR.

    read + parse + clean (emails.py) -> dedupe (corpus.Deduper) -> spool cleaned text to disk
    -> thread (corpus.assign_threads) -> split by thread hash -> fit tokenizer on train only
    -> encode every email -> {split}.bin/.idx, emails.jsonl, tokenizer.json, meta.json

Memory stays bounded on large corpora: bodies go to a spool file as they are read, and only small
per-email metadata (ids, references, normalized subject, participants) stays in memory for threading.
Everything written is a function of the input and the seed: no timestamps, no absolute paths, so the
same input and seed give byte-identical files.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Iterator, Sequence

from tqdm import tqdm

from seqlab import __version__
from seqlab.data.corpus import Deduper, ThreadMeta, assign_threads, split_for_thread
from seqlab.data.dataset import TokenWriter, token_dtype
from seqlab.data.emails import CleanOptions, read_emails
from seqlab.data.records import SkipReport
from seqlab.data.sources import resolve_source
from seqlab.data.tokenizer import Tokenizer, fit_tokenizer
from seqlab.errors import UserError

SPLITS = ("train", "val", "test")
SPOOL = "emails.spool.jsonl"
ENCODE_CHUNK = 512  # emails per encode_batch call


def _spool_emails(messages, opts: CleanOptions, report: SkipReport, limit: int | None, spool: Path,
                  progress: bool) -> tuple[list[ThreadMeta], dict[str, int]]:
    """Read, clean and dedupe; write each kept email as one JSON line; return metadata and dedupe counts."""
    deduper = Deduper()
    duplicates = {"duplicate": 0, "duplicate_body": 0}
    metas: list[ThreadMeta] = []
    with spool.open("w", encoding="utf-8") as f, tqdm(desc="reading mail", unit=" msg", disable=not progress) as bar:
        for email in read_emails(messages, opts, report, limit=limit):
            bar.update(report.seen - bar.n)
            reason = deduper.check(email)
            if reason is not None:
                duplicates[reason] = duplicates.get(reason, 0) + 1
                continue
            metas.append(ThreadMeta.from_email(email))
            f.write(json.dumps({"id": email.id, "source": email.source, "text": email.text()}, ensure_ascii=False))
            f.write("\n")
        bar.update(report.seen - bar.n)
    return metas, duplicates


def _iter_spool(spool: Path) -> Iterator[dict]:
    with spool.open(encoding="utf-8") as f:
        for line in f:
            yield json.loads(line)


def _train_texts(spool: Path, splits: Sequence[str]) -> Iterator[str]:
    for i, rec in enumerate(_iter_spool(spool)):
        if splits[i] == "train":
            yield rec["text"]


def _encode_all(spool: Path, out: Path, tok: Tokenizer, threads: Sequence[str], splits: Sequence[str],
                progress: bool) -> dict[str, dict[str, int]]:
    """Encode every spooled email into its split's token store and write emails.jsonl."""
    counts = {s: {"emails": 0, "tokens": 0, "bytes": 0, "threads": 0} for s in SPLITS}
    writers = {s: TokenWriter(out, s, tok.vocab_size) for s in SPLITS}
    seen_threads: dict[str, set[str]] = {s: set() for s in SPLITS}
    records = _iter_spool(spool)
    i = 0
    with (out / "emails.jsonl").open("w", encoding="utf-8") as index, \
            tqdm(total=len(splits), desc="encoding", unit=" email", disable=not progress) as bar:
        while True:
            chunk = [rec for _, rec in zip(range(ENCODE_CHUNK), records)]
            if not chunk:
                break
            for rec, ids in zip(chunk, tok.encode_batch([r["text"] for r in chunk])):
                split, thread = splits[i], threads[i]
                ids = [tok.bos_id, *ids, tok.eos_id]
                writers[split].add(ids)
                c = counts[split]
                c["emails"] += 1
                c["tokens"] += len(ids)
                c["bytes"] += len(rec["text"].encode("utf-8"))
                seen_threads[split].add(thread)
                index.write(json.dumps({"id": rec["id"], "thread": thread, "split": split,
                                        "source": rec["source"], "tokens": len(ids)}, ensure_ascii=False) + "\n")
                i += 1
            bar.update(len(chunk))
    for w in writers.values():
        w.close()
    for s in SPLITS:
        counts[s]["threads"] = len(seen_threads[s])
    return counts


def prepare(source: str, out: Path, *, tokenizer: str = "byte", vocab_size: int = 4096,
            split: tuple[float, float, float] = (0.9, 0.05, 0.05), seed: int = 0, keep_quotes: bool = False,
            keep_signatures: bool = False, mask_pii: bool = False, limit: int | None = None, count: int = 2000,
            groups: Sequence[str] | None = None, cache_dir: Path | None = None, progress: bool = True) -> dict:
    """Build DATA_DIR `out` from `source`; return the metadata also written to `out/meta.json`."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {out} exists and is not a directory")
    out.mkdir(parents=True, exist_ok=True)
    messages = resolve_source(source, cache_dir=cache_dir, groups=groups, count=count, seed=seed)
    opts = CleanOptions(keep_quotes=keep_quotes, keep_signatures=keep_signatures, mask_pii=mask_pii)
    report = SkipReport()
    spool = out / SPOOL
    try:
        metas, duplicates = _spool_emails(messages, opts, report, limit, spool, progress)
        if not metas:
            raise UserError(f"no usable email was found in {source} ({report.seen} messages seen)")
        threads = assign_threads(metas)
        splits = [split_for_thread(t, seed, split) for t in threads]
        if "train" not in splits:
            raise UserError("the train split is empty; use more mail or a larger train fraction in --split")
        tok = fit_tokenizer(tokenizer, _train_texts(spool, splits), vocab_size=vocab_size)
        tok.save(out / "tokenizer.json")
        counts = _encode_all(spool, out, tok, threads, splits, progress)
    finally:
        spool.unlink(missing_ok=True)
    meta = {
        "seqlab_version": __version__,
        "source": str(source),
        "seed": seed,
        "split_fractions": list(split),
        "clean": {"keep_quotes": keep_quotes, "keep_signatures": keep_signatures, "mask_pii": mask_pii},
        "seen": report.seen,
        "kept": sum(c["emails"] for c in counts.values()),
        "skipped": dict(sorted(report.skipped.items())),
        "duplicates": duplicates,
        "splits": counts,
        "tokenizer": {"kind": tok.kind, "vocab_size": tok.vocab_size, "sha256": tok.sha256(),
                      "bos_id": tok.bos_id, "eos_id": tok.eos_id, "pad_id": tok.pad_id},
        "token_dtype": str(token_dtype(tok.vocab_size)),
    }
    tmp = out / "meta.json.tmp"
    tmp.write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(tmp, out / "meta.json")
    return meta


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
                  f"(exact {dup.get('duplicate', 0)}, same body {dup.get('duplicate_body', 0)})"]
    skipped = meta["skipped"]
    total = sum(skipped.values())
    lines.append(f"skipped: {total}" + ("" if not total else " (" + ", ".join(f"{k} {v}" for k, v in skipped.items()) + ")"))
    return "\n".join(lines)
