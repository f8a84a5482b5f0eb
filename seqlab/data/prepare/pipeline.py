"""`seqlab prepare`: one streaming pass from a mail source to a DATA_DIR, its stages called in order here.

    source (mail/sources.py) -> read, parse, clean, dedupe, spool (read_mail.py: workers.py, dedupe.py, spool.py)
    -> thread and split (threadtable.py) -> fit the tokenizer on train only (tokenizer_fit.py)
    -> encode every email (encode.py) -> each email's context (reply_files.py) -> meta.json (meta_report.py)

Data moves one way: each stage reads what the one before left (the spools on disk, the thread table, the
split) and none calls back into an earlier one. Everything is written into a staging folder that replaces
`--out` only at the end (staging.py). Memory stays bounded on large corpora: bodies go to a spool file as
they are read, what dedupe and threading keep per email is numbers in numpy arrays, and a BPE tokenizer is
fitted on a bounded sample of train (`bpe_sample.BPE_SAMPLE_BYTES`). Everything written is a function of
the input and the `PrepareConfig` (not of the number of workers): no timestamps, no absolute paths of our
own, so the same input and seed give byte-identical files.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from seqlab.data.mail.imap_auth import ImapOptions
from seqlab.data.mail.message_files import FoundItems
from seqlab.data.mail.sources import resolve_source
from seqlab.data.prepare.encode import encode_all
from seqlab.data.prepare.held import SEEN_FILE, held_of, save_held
from seqlab.data.prepare.ledger import source_name, tracked_source, write_ledger
from seqlab.data.prepare.meta_report import build_meta, nothing_kept
from seqlab.data.prepare.options import PrepareConfig
from seqlab.data.prepare.read_mail import spool_mail
from seqlab.data.prepare.reply_files import thread_parents, write_contexts
from seqlab.data.prepare.reuse_tokenizer import reused_tokenizer, tokenizer_file
from seqlab.data.prepare.spool import CONTEXT_SPOOL_FILE, SPOOL_FILE
from seqlab.data.prepare.staging import discard, publish, staging_folder
from seqlab.data.prepare.threadtable import MIN_HELD_EMAILS, NAMES_FILE
from seqlab.data.prepare.tokenizer_fit import fit_tokenizer, train_texts
from seqlab.data.prepare.workers import default_workers
from seqlab.data.tokenizer import Tokenizer
from seqlab.durable import atomic_write_text
from seqlab.errors import UserError

__all__ = ["prepare"]


def prepare(config: PrepareConfig, out: Path, *, workers: int | None = None, cache_dir: Path | None = None,
            progress: bool = True, stats: dict[str, Any] | None = None, imap: ImapOptions | None = None) -> dict:
    """Build DATA_DIR `out` as `config` says; return the metadata also written to `out/meta.json`.

    The keywords change how the work is done, never what is written: `workers` processes parse mail
    (default: the CPUs available; 1 parses in-process), `cache_dir` holds a downloaded corpus, `progress`
    shows bars, `imap` says how to reach and log in to an IMAP source. `stats`, when given, is filled with wall
    seconds per stage, raw bytes parsed and the workers used; none of that goes into meta.json.
    """
    if workers is None:
        workers = default_workers()
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise UserError(f"--workers must be a positive integer, not {workers!r}")
    reused = None  # loaded (and checked) before any mail is read: (the tokenizer, the file it came from)
    if config.tokenizer_from is not None:
        reused = (reused_tokenizer(config.tokenizer_from), tokenizer_file(config.tokenizer_from))
    out = Path(out)
    staging = staging_folder(out)
    try:
        run = _Run(workers, cache_dir, progress, stats if stats is not None else {}, imap)
        meta = _build(staging, config, run, reused)
        publish(staging, out)
    except BaseException as exc:
        discard(staging, out, exc)
        raise
    return meta


class _Run:
    """How this prepare runs (not what it writes), and the seconds each stage took (`lap`)."""

    def __init__(self, workers: int, cache_dir: Path | None, progress: bool, stats: dict[str, Any],
                 imap: ImapOptions | None = None) -> None:
        self.workers, self.cache_dir, self.progress, self.stats = workers, cache_dir, progress, stats
        self.imap = imap
        self._clock = time.perf_counter()

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.stats[name] = now - self._clock
        self._clock = now


def _build(folder: Path, config: PrepareConfig, run: _Run, reused: tuple[Tokenizer, Path] | None) -> dict[str, Any]:
    """The stages in order, writing into `folder` (the staging folder); returns meta."""
    messages = resolve_source(config.source, cache_dir=run.cache_dir, groups=config.groups, count=config.count,
                              seed=config.seed, folders=config.folders, imap=run.imap,
                              progress=run.progress)
    tracked = tracked_source(messages)  # what was read of it goes to sources.json, for `prepare --update`
    spool, context_spool, names = folder / SPOOL_FILE, folder / CONTEXT_SPOOL_FILE, folder / NAMES_FILE
    assignment = None
    try:
        mail = spool_mail(FoundItems(tracked.items(None)) if tracked is not None else messages, config.clean,
                          config.limit, spool, context_spool, names, run.workers, run.progress, run.stats)
        run.lap("read_s")
        if not mail.table.emails:
            raise UserError(nothing_kept(config, mail))
        parents = thread_parents(mail.nodes, mail.replies)  # for emails that quote nothing: the parent's body
        assignment = mail.table.finish(config.seed, config.split, by_date=config.split_by == "date",
                                       min_held=MIN_HELD_EMAILS if config.split_by == "date" else 0)
        save_held(folder / SEEN_FILE, held_of(*mail.deduper.keys_held(), mail.nodes, assignment))
        # --limit may stop inside a source: nothing is recorded as read, so an update reads it all again
        write_ledger(folder, {source_name(config.source): tracked.state()}
                     if tracked is not None and config.limit is None else {})
        mail = mail._replace(table=None, nodes=None, replies=None)  # their arrays are freed; the split is compact
        run.lap("thread_split_s")
        if "train" not in assignment.splits:
            raise UserError("the train split is empty; use more mail or a larger train fraction in --split")
        tok = (reused[0] if reused is not None else fit_tokenizer(
            config.tokenizer, train_texts(spool, assignment.splits, config.seed), vocab_size=config.vocab_size))
        atomic_write_text(folder / "tokenizer.json", tok.to_json())  # the bytes whose sha256 meta.json records
        run.lap("fit_s")
        counts, dtype = encode_all(spool, folder, tok, assignment.threads, assignment.splits, run.progress,
                                   assignment.thread_counts())
        contexts = write_contexts(folder, tok, spool, context_spool, assignment.splits, parents)
        run.lap("encode_s")
    finally:
        if assignment is not None:
            assignment.close()
        for path in (spool, context_spool, names):
            path.unlink(missing_ok=True)
    run.stats.update(messages=mail.report.seen, kept=mail.report.kept)
    meta = build_meta(config, mail, counts, tok, dtype, contexts, reused[1] if reused is not None else None)
    atomic_write_text(folder / "meta.json", json.dumps(meta, indent=2, sort_keys=True) + "\n")
    return meta
