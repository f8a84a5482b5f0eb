"""The synthetic corpora the prepare benchmarks read, written once into a cache folder: mbox files of several
sizes from `synthetic_messages`, a tree of `.eml` files, and an Enron-layout tree (`maildir/<user>/<folder>/<n>.`,
CRLF line ends, X-From/X-Folder headers, no References/In-Reply-To, so threads join by subject as in Enron).
Files appear under their final names only when complete, so an interrupted write is redone, never read half."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

# ---------------------------------------------------------------- the corpus, written once


def _mbox_escape(raw: bytes) -> bytes:
    """mboxrd quoting: a body line starting with ">*From " gets one more ">" (mail/message_files.py undoes it)."""
    lines = raw.split(b"\n")
    return b"\n".join(b">" + line if line.lstrip(b">").startswith(b"From ") else line for line in lines)


def write_corpus(cache: Path, sizes: list[int], tree_size: int, prefix: str = "synthetic",
                 seed: int = 0, min_words: int = 40, max_words: int = 200) -> dict[str, Path]:
    """mbox files `<prefix>-<n>.mbox` for each size and (tree_size > 0) a tree `<prefix>-<n>-eml/`.

    Written once: one pass of the generator fills every file (the messages of a smaller corpus are the
    first ones of the largest), and files appear under their final names only when complete.
    """
    from seqlab.data.synthetic.generator import synthetic_messages

    cache.mkdir(parents=True, exist_ok=True)
    paths = {f"mbox-{n}": cache / f"{prefix}-{n}.mbox" for n in sizes}
    tree = cache / f"{prefix}-{tree_size}-eml"
    todo = [n for n in sizes if not paths[f"mbox-{n}"].is_file()]
    make_tree = tree_size > 0 and not tree.is_dir()
    if tree_size > 0:
        paths[f"tree-{tree_size}"] = tree
    if not todo and not make_tree:
        return paths
    total = max(todo + ([tree_size] if make_tree else []))
    print(f"writing {prefix} mail ({total} messages) into {cache} ...", flush=True)
    tmp_tree = cache / f".{tree.name}.tmp"
    if make_tree:
        shutil.rmtree(tmp_tree, ignore_errors=True)
        tmp_tree.mkdir()
    files = {n: open(cache / f".{prefix}-{n}.mbox.tmp", "wb") for n in todo}  # noqa: SIM115
    try:
        messages = synthetic_messages(count=total, seed=seed, min_words=min_words, max_words=max_words)
        for i, (_, raw) in enumerate(messages):
            entry = b"From bench@example.com Mon Jan  8 09:00:00 2024\n" + _mbox_escape(raw).rstrip(b"\n") + b"\n\n"
            for n, f in files.items():
                if i < n:
                    f.write(entry)
            if make_tree and i < tree_size:
                folder = tmp_tree / f"{i // 1000:03d}"  # 1,000 files per folder, as mail tools do
                folder.mkdir(exist_ok=True)
                (folder / f"{i:06d}.eml").write_bytes(raw)
    finally:
        for f in files.values():
            f.close()
    for n in todo:
        os.replace(cache / f".{prefix}-{n}.mbox.tmp", paths[f"mbox-{n}"])
    if make_tree:
        os.replace(tmp_tree, tree)
    return paths


_THREAD_HEADERS = re.compile(rb"^(?:In-Reply-To|References):.*\n(?:[ \t].*\n)*", re.M | re.I)


def enron_message(raw: bytes, i: int) -> bytes:
    """A synthetic message in the Enron corpus's form: no threading headers, X- headers, CRLF line ends."""
    head, _, body = raw.partition(b"\n\n")
    head = _THREAD_HEADERS.sub(b"", head + b"\n").rstrip(b"\n")
    user = f"user-{i // 2000:03d}".encode()
    head += (b"\nX-From: " + user + b"\nX-To: \nX-cc: \nX-bcc: \nX-Folder: \\" + user +
             b"\\Inbox\nX-Origin: " + user + b"\nX-FileName: " + user + b".nsf")
    return (head + b"\n\n" + body).replace(b"\n", b"\r\n")


def write_enron(cache: Path, n: int) -> Path:
    """`<cache>/enron-<n>/maildir/<user>/<folder>/<k>.`: n synthetic messages (seed 0) in Enron's layout."""
    from seqlab.data.synthetic.generator import synthetic_messages

    root = cache / f"enron-{n}"
    if root.is_dir():
        return root
    print(f"writing an Enron-layout tree of {n} messages into {root} ...", flush=True)
    tmp = cache / f".enron-{n}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    for i, (_, raw) in enumerate(synthetic_messages(count=n, seed=0)):
        folder = tmp / "maildir" / f"user-{i // 2000:03d}" / ("inbox", "sent_items", "discussion_threads")[i % 3]
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{i // 3 % 1000 + 1}.").write_bytes(enron_message(raw, i))
    os.replace(tmp, root)
    return root


def corpus_bytes(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
