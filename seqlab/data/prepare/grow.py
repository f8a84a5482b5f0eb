"""`seqlab prepare SOURCE --update DATA_DIR`: add to a DATA_DIR only the mail it does not hold yet.

    sources.json (ledger.py): read only what is new in SOURCE (TrackedSource.items(since))
    -> parse, clean, dedupe, also against what the folder holds (seen.bin, held.py) -> thread the new mail
    -> a new email that touches an old thread joins it (its split, its key); a new thread is split by the
       folder's own rule -> the old files copied into the staging folder, the new emails appended
    -> seen.bin, sources.json, meta.json (with what this update added) -> the folder swapped in (staging.py)

What stays as it was: the tokenizer (its file copied byte for byte, the new text encoded with it), and every
old email's split, thread key, tokens and context (the old bytes of each file come first, unchanged), so a
run trained on the old folder can `--resume` or `train --init` on the grown one. The settings are the
folder's own (meta.json's `prepare`). A crash leaves the old folder whole: everything is built beside it.
With nothing new, no token file is touched: meta.json (the report "added nothing") and sources.json are
replaced, each atomically.

Where an update differs from a full prepare of all the mail with the old tokenizer (`--tokenizer-from`):
for mail appended to a source (an mbox that grew, new files) whose new emails start new threads or reply
into old ones, the two agree email for email (ids, splits, threads, tokens, contexts; a test holds them
to it). They part where a full prepare would move old mail, which an update never does:

- a new email that joins old threads of different splits goes to the first of those splits (train before
  val before test) and the threads stay apart; a full prepare would make them one thread with one split;
- a new email that becomes the root of an old thread (a parent that arrives after its replies) joins that
  thread under its old key; a full prepare may choose the new root as the key and hash it elsewhere;
- an old email that quoted nothing keeps no context even when its parent arrives now;
- with `--split-by date`, the latest new threads go to test, then val, until each holds its fraction of all
  the folder's emails (`_split_new_by_date`); a full prepare would also move old threads from test to val
  to train;
- mail that a source reads again (a changed file) is dropped as held, and counted so.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from seqlab.data.layout import IDX_DTYPE, SPLITS, check_tokenizer, dtype_from_meta, load_meta
from seqlab.data.mail.message_files import FoundItems
from seqlab.data.mail.sources import resolve_source
from seqlab.data.prepare.dedupe import Deduper
from seqlab.data.prepare.encode import write_token_files
from seqlab.data.prepare.held import SEEN_FILE, Held, load_held, save_held
from seqlab.data.prepare.ledger import read_ledger, source_name, tracked_source, write_ledger
from seqlab.data.prepare.options import PrepareConfig
from seqlab.data.prepare.read_mail import SpooledMail, spool_mail
from seqlab.data.prepare.reply_files import context_body, thread_parents, write_context_files
from seqlab.data.prepare.spool import CONTEXT_SPOOL_FILE, SPOOL_FILE, iter_context_spool, iter_spool
from seqlab.data.prepare.staging import discard, publish, staging_folder
from seqlab.data.prepare.thread_split import ThreadSplit
from seqlab.data.prepare.threadtable import NAMES_FILE
from seqlab.data.prepare.workers import default_workers
from seqlab.data.tokenizer import Tokenizer, load_tokenizer
from seqlab.durable import atomic_write_bytes, atomic_write_text
from seqlab.errors import UserError

if TYPE_CHECKING:
    from seqlab.data.mail.imap_auth import ImapOptions

__all__ = ["update"]


def update(source: str, data_dir: Path, *, workers: int | None = None, cache_dir: Path | None = None,
           progress: bool = True, stats: dict[str, Any] | None = None, imap: ImapOptions | None = None,
           folders: tuple[str, ...] | None = None) -> dict[str, Any]:
    """Grow DATA_DIR `data_dir` with the mail of `source` it does not hold; return its new meta.json, whose
    `update` says what this update added. The keywords are `pipeline.prepare`'s; `folders` (Thunderbird's),
    when given, must be those the folder was prepared from."""
    data_dir = Path(data_dir)
    _put_back(data_dir)
    if not (data_dir / "meta.json").is_file():
        raise UserError(f"--update {data_dir} is not a data folder made by `seqlab prepare` (it holds no "
                        "meta.json); prepare it without --update first.")
    workers = default_workers() if workers is None else workers
    stats = stats if stats is not None else {}
    old_meta = load_meta(data_dir)
    config = _config(old_meta, source, data_dir)
    if folders and tuple(folders) != config.folders:
        raise UserError(f"--folders {','.join(folders)} differs from the folders {data_dir} was prepared from "
                        f"({','.join(config.folders or ('all',))}); leave --folders out with --update.")
    held = load_held(data_dir / SEEN_FILE)
    ledger = read_ledger(data_dir)
    tok = load_tokenizer(data_dir / "tokenizer.json")
    check_tokenizer(data_dir, old_meta, tok.vocab_size, tok.sha256())
    messages = resolve_source(config.source, cache_dir=cache_dir, groups=config.groups, count=config.count,
                              seed=config.seed, folders=config.folders, imap=imap, progress=progress)
    tracked, name = tracked_source(messages), source_name(source)
    items = FoundItems(tracked.items(ledger.get(name))) if tracked is not None else messages
    staging = staging_folder(data_dir)
    try:
        start = time.perf_counter()
        spool, context_spool, names = staging / SPOOL_FILE, staging / CONTEXT_SPOOL_FILE, staging / NAMES_FILE
        try:
            mail = spool_mail(items, config.clean, None, spool, context_spool, names, workers, progress, stats,
                              deduper=Deduper.holding(held.exact, held.bodies))
            stats["read_s"] = time.perf_counter() - start
            if tracked is not None:
                ledger[name] = tracked.state()
            if mail.table.emails:
                meta = _grow(staging, data_dir, config, old_meta, held, tok, mail, progress)
                write_ledger(staging, ledger)
                atomic_write_text(staging / "meta.json", json.dumps(meta, indent=2, sort_keys=True) + "\n")
        finally:
            for path in (spool, context_spool, names):
                path.unlink(missing_ok=True)
        if mail.table.emails:
            publish(staging, data_dir)
            return meta
        # Nothing new: the token files stay as they are; the report and the ledger are replaced in place.
        shutil.rmtree(staging, ignore_errors=True)
        meta = _merged_meta(old_meta, mail, {s: _zero() for s in SPLITS}, {}, {s: 0 for s in SPLITS}, 0, source)
        write_ledger(data_dir, ledger)
        atomic_write_text(data_dir / "meta.json", json.dumps(meta, indent=2, sort_keys=True) + "\n")
        return meta
    except BaseException as exc:
        discard(staging, data_dir, exc)
        raise


def _put_back(data_dir: Path) -> None:
    """A folder killed between the two renames of `staging.publish` is absent, its old self whole beside it as
    `.NAME.old-<random>`: put that back, so the update runs on it (and a crash is never worse than a rerun)."""
    if data_dir.exists():
        return
    aside = sorted(data_dir.parent.glob(f".{data_dir.name}.old-*")) if data_dir.parent.is_dir() else []
    if len(aside) == 1 and (aside[0] / "meta.json").is_file():
        os.replace(aside[0], data_dir)


def _config(meta: dict[str, Any], source: str, data_dir: Path) -> PrepareConfig:
    """The folder's own settings (meta.json's `prepare`), reading `source`."""
    recorded = meta.get("prepare")
    if not isinstance(recorded, dict):
        raise UserError(f"--update {data_dir} records no prepare settings in meta.json (it was prepared by an "
                        "older seqlab); prepare it once more without --update.")
    fields = {k: tuple(v) if isinstance(v, list) else v for k, v in recorded.items() if k != "source"}
    try:
        return PrepareConfig(str(source), **{**fields, "limit": None})
    except TypeError as exc:
        raise UserError(f"{data_dir / 'meta.json'} records prepare settings this seqlab does not know ({exc}); "
                        "prepare the folder again without --update.") from None


def _zero() -> dict[str, int]:
    return {"emails": 0, "tokens": 0, "bytes": 0, "threads": 0}


def _grow(folder: Path, data_dir: Path, config: PrepareConfig, old_meta: dict[str, Any], held: Held,
          tok: Tokenizer, mail: SpooledMail, progress: bool) -> dict[str, Any]:
    """Thread and split the spooled new mail, write the grown folder into `folder`; return its meta."""
    spool, context_spool = folder / SPOOL_FILE, folder / CONTEXT_SPOOL_FILE
    assignment = mail.table.finish(config.seed, config.split, by_date=config.split_by == "date", min_held=0)
    try:
        joined, across = _join(held, assignment)
        comp_split = assignment.split_codes.copy()
        comp_split[joined >= 0] = held.comp_split[joined[joined >= 0]]
        if assignment.first_date is not None:
            _split_new_by_date(comp_split, joined, assignment, old_meta, config.split)
        keys = [held.key(j) if j >= 0 else assignment.key(c) for c, j in enumerate(joined.tolist())]
        codes = comp_split[assignment.email_comp]  # (M,) each new email's split
        splits = [SPLITS[c] for c in codes.tolist()]
        threads = [keys[c] for c in assignment.email_comp.tolist()]
        new_threads = {s: int(((comp_split == i) & (joined < 0)).sum()) for i, s in enumerate(SPLITS)}
        atomic_write_bytes(folder / "tokenizer.json", (data_dir / "tokenizer.json").read_bytes())
        counts = _append_tokens(folder, data_dir, tok, spool, threads, splits, progress)
        contexts = _append_contexts(folder, data_dir, tok, spool, context_spool, splits,
                                    _parents(held, mail.nodes, mail.replies), held, old_meta)
        save_held(folder / SEEN_FILE, _grown(held, mail, assignment, joined, comp_split, keys, codes))
    finally:
        assignment.close()
    return _merged_meta(old_meta, mail, counts, contexts, new_threads, across, config.source)


def _join(held: Held, assignment: ThreadSplit) -> tuple[np.ndarray, int]:
    """(per new thread the old thread it joins, -1 for none; how many touch old threads of two splits).

    A new thread touches an old one when one of its nodes (an id, a subject key) is an old thread's node;
    of several, the first split's (train, val, test), then the oldest thread."""
    comps = len(assignment.split_codes)
    joined = np.full(comps, -1, dtype=np.int64)
    nodes = assignment.node_digests
    if not len(held.node) or not len(nodes):
        return joined, 0
    at = np.minimum(np.searchsorted(held.node, nodes), len(held.node) - 1)
    hit = held.node[at] == nodes
    new_comp, old_comp = assignment.node_comp[hit].astype(np.int64), held.node_comp[at[hit]].astype(np.int64)
    if not len(new_comp):
        return joined, 0
    old_split = held.comp_split[old_comp]
    order = np.lexsort((old_comp, old_split, new_comp))
    new_comp, old_comp, old_split = new_comp[order], old_comp[order], old_split[order]
    first = np.ones(len(order), dtype=bool)
    first[1:] = new_comp[1:] != new_comp[:-1]
    joined[new_comp[first]] = old_comp[first]
    starts = np.flatnonzero(first)
    lowest, highest = np.minimum.reduceat(old_split, starts), np.maximum.reduceat(old_split, starts)
    return joined, int((lowest != highest).sum())


def _split_new_by_date(comp_split: np.ndarray, joined: np.ndarray, assignment: ThreadSplit,
                       old_meta: dict[str, Any], fractions: tuple[float, float, float]) -> None:
    """`--split-by date` for the new threads (in place): the latest go to test until it holds its fraction of
    all the folder's emails, then to val likewise, the rest to train (`threadtable.split_by_date` over the old
    and the new mail, without moving an old thread)."""
    emails = np.bincount(assignment.email_comp, minlength=len(comp_split))  # (C,) new emails per new thread
    total = sum(old_meta["splits"][s]["emails"] for s in SPLITS) + int(emails.sum())
    fresh = np.flatnonzero(joined < 0)
    order = fresh[np.lexsort((fresh, assignment.first_date[fresh]))]  # oldest first, ties in input order
    comp_split[fresh] = SPLITS.index("train")
    at = len(order) - 1
    for name, fraction in zip(("test", "val"), (fractions[2], fractions[1])):
        code = SPLITS.index(name)
        have = old_meta["splits"][name]["emails"] + int(emails[(joined >= 0) & (comp_split == code)].sum())
        want = round(fraction * total) if fraction > 0 else 0
        while have < want and at >= 0:
            comp_split[order[at]] = code
            have += int(emails[order[at]])
            at -= 1


def _parents(held: Held, nodes: np.ndarray, replies: np.ndarray) -> np.ndarray:
    """(M,) int64 the email each new email's In-Reply-To names: an old email i as -(i + 2), a new one as its
    index, -1 for none. Old mail comes first, as in a full prepare of all of it."""
    parents = thread_parents(nodes, replies)
    if len(held.email_node):
        order = np.argsort(held.email_node, kind="stable")
        ranked = held.email_node[order]
        at = np.minimum(np.searchsorted(ranked, replies), len(ranked) - 1)
        found = (replies != 0) & (ranked[at] == replies)
        parents[found] = -(order[at[found]].astype(np.int64) + 2)
    return parents


def _append_tokens(folder: Path, data_dir: Path, tok: Tokenizer, spool: Path, threads: list[str],
                   splits: list[str], progress: bool) -> dict[str, dict[str, int]]:
    """The old token files and emails.jsonl, then the new emails; the counts of what was added."""
    counts = {s: _zero() for s in SPLITS}
    write_token_files(spool, folder, tok, threads, splits, counts, progress, keep_from=data_dir)
    return counts


def _old_bodies(data_dir: Path, tok: Tokenizer, held: Held, wanted: set[int], meta: dict[str, Any]
                ) -> dict[int, bytes]:
    """The bodies of the old emails `wanted` (indices in emails.jsonl order), read back from their tokens."""
    if not wanted:
        return {}
    dtype = dtype_from_meta(meta, data_dir)
    out: dict[int, bytes] = {}
    for code, split in enumerate(SPLITS):
        mine = sorted(i for i in wanted if held.email_split[i] == code)
        if not mine:
            continue
        rank = np.cumsum(held.email_split == code) - 1  # (N,) each email's place in its split
        tokens = np.memmap(data_dir / f"{split}.bin", dtype=dtype, mode="r")
        starts = np.fromfile(data_dir / f"{split}.idx", dtype=IDX_DTYPE)
        ends = np.append(starts[1:], len(tokens))
        for i in mine:
            ids = tokens[starts[rank[i]]:ends[rank[i]]].tolist()
            out[i] = context_body(b"".join(tok.token_bytes(t) for t in ids))  # specials are b""
    return out


def _append_contexts(folder: Path, data_dir: Path, tok: Tokenizer, spool: Path, context_spool: Path,
                     splits: list[str], parents: np.ndarray, held: Held, meta: dict[str, Any]) -> dict[str, Any]:
    """The old contexts, then each new email's (`reply_files.write_contexts`, the parent maybe old)."""
    quoted_len = [len(q) for q in iter_context_spool(context_spool)]
    wanted = {int(parents[i]) for i, n in enumerate(quoted_len) if n == 0 and parents[i] != -1}
    new_bodies = {i: context_body(rec.text) for i, rec in enumerate(iter_spool(spool)) if i in wanted}
    old_bodies = _old_bodies(data_dir, tok, held, {-p - 2 for p in wanted if p <= -2}, meta)
    def parent_body(i: int, split: str) -> bytes | None:
        parent = int(parents[i])
        if parent <= -2:  # an old email, -2 - its index
            return old_bodies[-parent - 2] if SPLITS[held.email_split[-parent - 2]] == split else None
        return new_bodies[parent] if parent >= 0 and splits[parent] == split else None

    return write_context_files(folder, tok, context_spool, splits, parent_body, keep_from=data_dir)


def _grown(held: Held, mail: SpooledMail, assignment: ThreadSplit, joined: np.ndarray, comp_split: np.ndarray,
           keys: list[str], codes: np.ndarray) -> Held:
    """seen.bin of the grown folder: the old arrays with the new mail's added."""
    exact, bodies = mail.deduper.keys_held()
    fresh = joined < 0
    comp_id = np.where(fresh, len(held.comp_split) + np.cumsum(fresh) - 1, joined)  # (C,) thread in the grown folder
    nodes = assignment.node_digests
    at = np.minimum(np.searchsorted(held.node, nodes), max(len(held.node) - 1, 0))
    new = ~(held.node[at] == nodes) if len(held.node) else np.ones(len(nodes), dtype=bool)
    node = np.concatenate((held.node, nodes[new]))
    node_comp = np.concatenate((held.node_comp, comp_id[assignment.node_comp[new]].astype(np.int32)))
    order = np.argsort(node, kind="stable")
    new_keys = [keys[c].encode("utf-8", "surrogatepass") for c in np.flatnonzero(fresh).tolist()]
    return Held(exact=exact, bodies=bodies, email_node=np.concatenate((held.email_node, mail.nodes)),
                email_split=np.concatenate((held.email_split, codes.astype(np.uint8))), node=node[order],
                node_comp=node_comp[order], comp_split=np.concatenate((held.comp_split, comp_split[fresh])),
                key_len=np.concatenate((held.key_len, np.fromiter(map(len, new_keys), dtype=np.uint32,
                                                                  count=len(new_keys)))),
                keys=np.concatenate((held.keys, np.frombuffer(b"".join(new_keys), dtype=np.uint8))))


def _merged_meta(old: dict[str, Any], mail: SpooledMail, counts: dict[str, dict[str, int]],
                 contexts: dict[str, dict[str, int]], new_threads: dict[str, int], across: int,
                 source: str) -> dict[str, Any]:
    """meta.json of the grown folder: the old counts plus the new, and `update`, what this update did."""
    meta = json.loads(json.dumps(old))
    report = mail.report
    meta["seen"] += report.seen
    added = sum(c["emails"] for c in counts.values())
    meta["kept"] += added
    meta["skipped"] = dict(sorted((Counter(meta["skipped"]) + Counter(report.skipped)).items()))
    meta["duplicates"] = dict(sorted((Counter(meta["duplicates"]) + Counter(mail.duplicates)).items()))
    for s in SPLITS:
        for key in ("emails", "tokens", "bytes"):
            meta["splits"][s][key] += counts[s][key]
        meta["splits"][s]["threads"] += new_threads[s]
        for key, value in contexts.get(s, {}).items():
            meta["contexts"]["splits"][s][key] += value
    meta["update"] = {
        "source": source, "seen": report.seen, "added": added,
        "splits": {s: {"emails": counts[s]["emails"], "tokens": counts[s]["tokens"],
                       "new_threads": new_threads[s]} for s in SPLITS},
        "held": mail.duplicates.get("held", 0),
        "duplicates": sum(n for k, n in mail.duplicates.items() if k != "held"),
        "skipped": dict(sorted(report.skipped.items())), "threads_across_splits": across,
    }
    meta["updates"] = int(old.get("updates", 0)) + 1
    return meta
