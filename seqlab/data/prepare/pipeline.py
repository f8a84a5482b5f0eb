"""`seqlab prepare`: one streaming pass from a mail source to a DATA_DIR.

    read (mail/files.py) -> parse + clean + dedupe digests (mail/reader.py, in worker processes: mail/workers.py)
    -> dedupe (corpus.Deduper) -> spool cleaned text to disk (mail/spool.py) -> thread (mail/threadtable.py)
    -> split by thread hash -> fit tokenizer on train only -> encode every email
    -> {split}.bin/.idx, emails.jsonl, tokenizer.json, meta.json

The DATA_DIR is complete or absent: everything is written into a hidden sibling folder
(`.NAME.prepare-<random>`), which replaces `--out` only at the end, so a crash, Ctrl-C or a full disk leaves
`--out` as it was (absent, or an earlier prepare's complete folder). A full disk is a `UserError` naming
`--out` and "no space left". `--out` may be new, empty, or an earlier prepare's folder; a folder holding
anything else is refused rather than replaced.

Memory stays bounded on large corpora: bodies go to a spool file as they are read; what must be kept
per email for dedupe and threading is numbers in numpy arrays (8-byte digests, dates, links: about 100
bytes an email, `mail/digests.py`, `mail/threadtable.py`), and the ids a thread key may be chosen from go
to a names file beside the spool; a BPE tokenizer is fitted on a bounded sample of train
(`bpe_sample.BPE_SAMPLE_BYTES`). benchmarks/bench_prepare.py measures it. Everything written is a
function of the input and the seed (not of the number of workers): no timestamps, no absolute paths, so
the same input and seed give byte-identical files.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import time
from array import array
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from seqlab.data.bpe_sample import ByteSample
from seqlab.data.contexts import ContextSpool, thread_parents, write_contexts
from seqlab.data.durable import DiskFullError, atomic_write_text, fsync_dir, is_disk_full, kill_point
from seqlab.data.encode import SPLITS, encode_all
from seqlab.data.mail.corpus import Deduper
from seqlab.data.mail.mime import parse_addresses
from seqlab.data.mail.reader import CleanOptions
from seqlab.data.mail.records import SkipReport
from seqlab.data.mail.sources import resolve_source
from seqlab.data.mail.spool import SpoolWriter, iter_spool
from seqlab.data.mail.threadtable import ThreadSplit, ThreadTable
from seqlab.data.mail.workers import StreamStats, default_workers, parse_stream, peak_rss_bytes, source_items
from seqlab.data.reuse_tokenizer import reused_tokenizer, tokenizer_file
from seqlab.data.tokenizer import Tokenizer, fit_tokenizer
from seqlab.errors import UserError
from seqlab.version import __version__

SPOOL = "emails.spool"
CTX_SPOOL = "contexts.spool"  # each kept email's quoted context, beside SPOOL (seqlab.data.contexts)
NAMES = "threads.names"  # the ids thread keys are chosen from (mail/threadtable.py)
# What an earlier prepare may have left in --out (older versions wrote in place, temporaries included):
# a folder holding only these may be replaced.
_EXTS = ("bin", "idx", "ctx.bin", "ctx.idx")
_OURS = ({f"{s}.{ext}" for s in SPLITS for ext in _EXTS} | {"tokenizer.json", "emails.jsonl", "meta.json",
         SPOOL, CTX_SPOOL, "meta.json.tmp", "tokenizer.json.tmp"}
        | {f".{s}.{ext}.tmp" for s in SPLITS for ext in _EXTS})


def _spool_emails(messages: Any, opts: CleanOptions, report: SkipReport, limit: int | None, spool: Path,
                  workers: int, progress: bool, stats: dict[str, Any],
                  ) -> tuple[ThreadTable, dict[str, int], tuple[np.ndarray, np.ndarray]]:
    """Read, clean and dedupe; spool each kept email; return the thread links, the dedupe counts, and each
    kept email's node and In-Reply-To digests (uint64, 0 without one: its parent, for its context).

    `stats` gets the seconds the main process spent on dedupe and spool writes (the rest of this stage's
    wall time is reading and parsing, mostly overlapped with it when workers parse).
    """
    deduper = Deduper()
    duplicates = {"duplicate": 0, "duplicate_body": 0}
    table = ThreadTable(spool.with_name(NAMES))
    stream = StreamStats()
    spent = 0.0
    contexts = ContextSpool(spool.with_name(CTX_SPOOL))
    nodes, replies = array("Q"), array("Q")  # each kept email's node and In-Reply-To digests: its parent, later
    with SpoolWriter(spool) as writer, tqdm(desc="reading mail", unit=" msg", disable=not progress) as bar:
        for kept in parse_stream(source_items(messages, limit), opts, report, workers=workers, stats=stream):
            t0 = time.perf_counter()
            for k in kept:
                reason = deduper.check_keys(k.exact, k.body_key)
                if reason is not None:
                    duplicates[reason] += 1
                    continue
                table.add(k.links)
                writer.write(k.record)
                contexts.write(k.context)
                nodes.append(k.links.node)
                replies.append(k.reply_to)
            spent += time.perf_counter() - t0
            bar.update(report.seen - bar.n)
    contexts.close()
    stats.update(dedupe_spool_s=spent, raw_bytes=stream.raw_bytes, workers_used=stream.workers,
                 pool_fallback=stream.fallback, read_peak_rss_bytes=peak_rss_bytes(),
                 table_bytes=table.nbytes + deduper.nbytes, kept_emails=table.emails)
    return table, duplicates, (np.frombuffer(nodes, dtype=np.uint64), np.frombuffer(replies, dtype=np.uint64))


def _train_texts(spool: Path, splits: Sequence[str], seed: int) -> Iterator[str]:
    """The train texts a BPE tokenizer is fitted on: all of them, or a seeded sample of about
    `BPE_SAMPLE_BYTES` when train is larger (bpe_sample.py). The byte tokenizer never reads them."""
    total = sum(len(rec.text) for rec, split in zip(iter_spool(spool), splits) if split == "train")
    sample = ByteSample(total, seed)
    for rec, split in zip(iter_spool(spool), splits):
        if split == "train" and sample.take(len(rec.text)):
            yield rec.text.decode("utf-8")


MIN_HELD_EMAILS = 10  # val and test of a date split: fewer lets --init pick its best step from noise
MIN_ADAPT_EMAILS = 50  # train emails below which the report says there is too little to adapt on


def _split_threads(table: ThreadTable, seed: int, split: tuple[float, float, float],
                   split_by: str = "thread") -> ThreadSplit:
    """Thread key and split of each kept email, in input order: one hash per thread, or (`split_by="date"`)
    the latest threads held out (`threadtable.split_by_date`)."""
    if split_by == "date":
        return table.finish(seed, split, by_date=True, min_held=MIN_HELD_EMAILS)
    return table.finish(seed, split)


def prepare(source: str, out: Path, *, tokenizer: str = "byte", vocab_size: int = 4096,
            split: tuple[float, float, float] = (0.9, 0.05, 0.05), seed: int = 0, keep_quotes: bool = False,
            keep_signatures: bool = False, mask_pii: bool = False, limit: int | None = None, count: int = 2000,
            groups: Sequence[str] | None = None, cache_dir: Path | None = None, progress: bool = True,
            workers: int | None = None, stats: dict[str, Any] | None = None, senders: Sequence[str] = (),
            exclude_senders: Sequence[str] = (), tokenizer_from: Path | None = None,
            split_by: str | None = None) -> dict:
    """Build DATA_DIR `out` from `source`; return the metadata also written to `out/meta.json`.

    `workers` processes parse mail (default: the CPUs available; 1 parses in-process); the output does
    not depend on it. `stats`, when given, is filled with wall seconds per stage, raw bytes parsed and
    the workers used; none of that goes into meta.json, which stays a function of the input and seed.
    `senders` keeps only mail From those addresses, `exclude_senders` drops theirs (counted skips).
    `tokenizer_from` (a RUN_DIR, DATA_DIR or tokenizer.json) encodes with that tokenizer instead of fitting
    one (`reuse_tokenizer.py`; `tokenizer` and `vocab_size` are then not used). `split_by` is "thread" (a
    seeded hash of each thread) or "date" (earlier threads train, the latest are held out, val and test at
    least MIN_HELD_EMAILS each); by default "date" when `senders` picks one person's mail, else "thread".
    """
    if split_by is None:
        split_by = "date" if senders else "thread"
    if split_by not in ("thread", "date"):
        raise UserError(f"--split-by must be thread or date, not {split_by!r}")
    if workers is None:
        workers = default_workers()
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise UserError(f"--workers must be a positive integer, not {workers!r}")
    stats = stats if stats is not None else {}
    # loaded (and checked) before any mail is read; (tokenizer, the file it came from)
    reused = (reused_tokenizer(tokenizer_from), tokenizer_file(tokenizer_from)) if tokenizer_from is not None else None
    out = Path(out)
    staging = _staging_folder(out)
    try:
        meta = _build(staging, source, tokenizer=tokenizer, vocab_size=vocab_size, split=split, seed=seed,
                      opts=CleanOptions(keep_quotes=keep_quotes, keep_signatures=keep_signatures,
                                        mask_pii=mask_pii, senders=_addresses(senders, "--sender"),
                                        exclude_senders=_addresses(exclude_senders, "--exclude-sender")),
                      limit=limit, count=count, groups=groups, cache_dir=cache_dir, progress=progress,
                      workers=workers, stats=stats, reused=reused, split_by=split_by)
        _publish(staging, out)
    except BaseException as exc:
        shutil.rmtree(staging, ignore_errors=True)
        if isinstance(exc, DiskFullError) or is_disk_full(exc):
            where = exc.path.name if isinstance(exc, DiskFullError) else "the spool"
            state = "an earlier prepare's folder was kept as it was" if out.exists() else "nothing was written"
            raise UserError(f"cannot write {out}: no space left on the device (while writing {where}); "
                            f"{state}") from None
        raise
    return meta


def _addresses(values: Sequence[str], flag: str) -> frozenset[str]:
    """The addresses in `--sender` / `--exclude-sender` values, normalized as a From header's address is
    (`mime.parse_addresses`, case-folded as `reader` compares them), so a value pasted from a From line,
    `Matthias Saou <Matthias@egwn.net>`, matches as `matthias@egwn.net` does. A value without an address
    (a name, a typo) is refused: it would match nothing, and an --exclude-sender would silently leave the
    person in."""
    out: set[str] = set()
    for value in values:
        found = parse_addresses(value)
        if not found:
            raise UserError(f"{flag} {value!r} holds no email address; give one like name@example.org")
        out.update(a.casefold() for a in found)
    return frozenset(out)


def _nothing_kept(source: str, report: SkipReport, opts: CleanOptions) -> str:
    """The error when no email is left: how many were seen and why each was skipped (a --sender that
    matched nobody says so)."""
    why = ", ".join(f"{reason} {n}" for reason, n in report.skipped.most_common())
    text = f"no usable email was found in {source} ({report.seen} messages seen{'; skipped: ' + why if why else ''})"
    if opts.senders and report.skipped["other_sender"]:
        text += f"; no kept message is From {', '.join(sorted(opts.senders))}"
    return text


def _staging_folder(out: Path) -> Path:
    """A new hidden sibling of `out` to build the DATA_DIR in (same file system, so a rename publishes it).

    `out` itself must be absent, an empty folder or an earlier prepare's folder: anything else is refused
    rather than replaced, since the user's files there would be lost.
    """
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {out} exists and is not a directory")
    if out.is_dir():
        foreign = sorted(p.name for p in out.iterdir() if p.name not in _OURS)
        if foreign:
            raise UserError(f"--out {out} holds files that `seqlab prepare` did not write ({', '.join(foreign[:3])}"
                            f"{' ...' if len(foreign) > 3 else ''}); choose a new or empty folder")
    parent = Path(os.path.abspath(out)).parent
    staging = parent / f".{Path(os.path.abspath(out)).name}.prepare-{secrets.token_hex(4)}"
    try:
        parent.mkdir(parents=True, exist_ok=True)
        staging.mkdir()
    except OSError as exc:
        raise UserError(f"--out {out} cannot be created ({exc.strerror})") from None
    return staging


def _publish(staging: Path, out: Path) -> None:
    """Move the finished folder to `out`, replacing an earlier prepare's folder there.

    Two renames: the old folder aside, the new one in. Interrupted between them (Ctrl-C), the old one is
    put back; killed between them, `out` is absent and the old folder waits as `.NAME.old-<random>`.
    """
    fsync_dir(staging)
    if not out.exists():
        os.replace(staging, out)
    else:
        old = staging.with_name(staging.name.replace(".prepare-", ".old-"))
        os.replace(out, old)
        try:
            kill_point(f"{out.name}:old-moved")
            os.replace(staging, out)
        except BaseException:
            os.replace(old, out)
            raise
        shutil.rmtree(old, ignore_errors=True)
    fsync_dir(out.parent)


def _build(out: Path, source: str, *, tokenizer: str, vocab_size: int, split: tuple[float, float, float],
           seed: int, opts: CleanOptions, limit: int | None, count: int, groups: Sequence[str] | None,
           cache_dir: Path | None, progress: bool, workers: int, stats: dict[str, Any],
           reused: tuple[Tokenizer, Path] | None = None, split_by: str = "thread") -> dict[str, Any]:
    """The one pass of `prepare`, writing into the folder `out` (the staging folder); returns meta."""
    messages = resolve_source(source, cache_dir=cache_dir, groups=groups, count=count, seed=seed)
    report = SkipReport()
    spool = out / SPOOL
    clock = time.perf_counter()

    def lap(name: str) -> None:
        nonlocal clock
        now = time.perf_counter()
        stats[name] = now - clock
        clock = now

    assignment: ThreadSplit | None = None
    try:
        table, duplicates, replies = _spool_emails(messages, opts, report, limit, spool, workers, progress, stats)
        lap("read_s")
        if not table.emails:
            raise UserError(_nothing_kept(source, report, opts))
        parents = thread_parents(*replies)  # for emails that quote nothing: the parent's body as context
        del replies
        assignment = _split_threads(table, seed, split, split_by)
        del table  # its arrays are freed; the assignment keeps 4 bytes an email and 13 a thread
        threads, splits = assignment.threads, assignment.splits
        lap("thread_split_s")
        if "train" not in splits:
            raise UserError("the train split is empty; use more mail or a larger train fraction in --split")
        tok = (reused[0] if reused is not None
               else fit_tokenizer(tokenizer, _train_texts(spool, splits, seed), vocab_size=vocab_size))
        atomic_write_text(out / "tokenizer.json", tok.to_json())  # the bytes whose sha256 meta.json records
        lap("fit_s")
        counts, dtype = encode_all(spool, out, tok, threads, splits, progress, assignment.thread_counts())
        contexts = write_contexts(out, tok, spool, out / CTX_SPOOL, splits, parents)
        lap("encode_s")
    finally:
        if assignment is not None:
            assignment.close()
        spool.unlink(missing_ok=True)
        (out / CTX_SPOOL).unlink(missing_ok=True)
        spool.with_name(NAMES).unlink(missing_ok=True)
    stats.update(messages=report.seen, kept=report.kept)
    meta = _meta(source, seed, split, opts, report, duplicates, counts, tok, dtype)
    meta["contexts"] = contexts
    if split_by == "date":  # a hashed split adds nothing: older folders' meta.json stays the same
        meta["split_by"] = "date"
    if reused is not None:  # where a reused tokenizer came from; a fitted one adds nothing (same meta as before)
        meta["tokenizer"]["from"] = str(reused[1])
    atomic_write_text(out / "meta.json", json.dumps(meta, indent=2, sort_keys=True) + "\n")
    return meta


def _meta(source: str, seed: int, split: tuple[float, float, float], opts: CleanOptions, report: SkipReport,
          duplicates: dict[str, int], counts: dict[str, dict[str, int]], tok: Tokenizer, dtype: str) -> dict[str, Any]:
    return {
        "seqlab_version": __version__,
        "source": str(source),
        "seed": seed,
        "split_fractions": list(split),
        "clean": {"keep_quotes": opts.keep_quotes, "keep_signatures": opts.keep_signatures,
                  "mask_pii": opts.mask_pii,  # the sender filters only when set: older folders stay identical
                  **({"senders": sorted(opts.senders)} if opts.senders else {}),
                  **({"exclude_senders": sorted(opts.exclude_senders)} if opts.exclude_senders else {})},
        "seen": report.seen,
        "kept": sum(c["emails"] for c in counts.values()),
        "skipped": dict(sorted(report.skipped.items())),
        "duplicates": duplicates,
        "splits": counts,
        "tokenizer": {"kind": tok.kind, "vocab_size": tok.vocab_size, "sha256": tok.sha256(),
                      "bos_id": tok.bos_id, "eos_id": tok.eos_id, "pad_id": tok.pad_id},
        "token_dtype": dtype,
    }


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
