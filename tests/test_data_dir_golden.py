"""The bytes of a DATA_DIR, pinned: every file `prepare` writes for a few tiny inputs, held to sha256 digests
recorded in tests/golden/data_dirs.json by the code before the data side was reorganised into readers and
writers. A refactoring of `seqlab/data` must leave every digest as it is.

The cases cover the paths through `prepare`: the byte and the BPE tokenizer, a reused tokenizer
(`tokenizer_from`), replies whose context is their own quote and replies whose context is the parent their
In-Reply-To names (`{split}.ctx.*` with both sources), `senders` with the date split it implies, the
cleaning options, and mail on disk as an mbox, a Maildir, a tree of .eml files and a CSV.

Normalised before hashing, and why:
- meta.json: `source` and `tokenizer.from` are paths under pytest's temporary folder, which differ per run,
  so they are replaced by the path relative to that folder; `prepare`, the config the DATA_DIR was made
  with (a key added after the digests were recorded), is removed so that the rest of meta.json is still
  compared byte for byte; `seqlab_version` is removed, so that a version bump is not a byte change.
- emails.jsonl: the `source` label of mail read from disk is a path under the temporary folder, made
  relative in the same way.
- sources.json (what was read of each source, for `prepare --update`) records each file's mtime, which
  differs per run: left out (tests/test_prepare_update.py checks what it does).
Everything else is compared as written. Regenerate (only for an intended format change) with
`python tests/test_data_dir_golden.py --write`.
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from mail_samples import corpus_messages, write_layouts

import seqlab

GOLDEN = Path(__file__).parent / "golden" / "data_dirs.json"
PERSON = "Alex Moreno <alex.moreno@harbourline.example>"


def _thread_replies() -> list[bytes]:
    """Replies that quote nothing but name their parent by In-Reply-To: their context is the parent's body."""
    msgs = []
    for i in range(6):
        parent = (f"From: Kim Lee <kim@example.org>\nTo: Sam Roe <sam@example.org>\nSubject: Plan {i}\n"
                  f"Message-ID: <p{i}@example.org>\nDate: Tue, 9 Jan 2024 1{i}:00:00 +0000\n\n"
                  f"Sam, can we move the review of plan {i} to room {i + 3} on Friday at {i + 9}?\n").encode()
        reply = (f"From: Sam Roe <sam@example.org>\nTo: Kim Lee <kim@example.org>\nSubject: Re: Plan {i}\n"
                 f"Message-ID: <r{i}@example.org>\nIn-Reply-To: <p{i}@example.org>\n"
                 f"Date: Tue, 9 Jan 2024 1{i}:30:00 +0000\n\nKim, yes: room {i + 3} on Friday works for me.\n").encode()
        msgs += [parent, reply]
    return msgs


def _mail_layouts(tmp: Path) -> dict[str, Path]:
    (tmp / "mail").mkdir()
    return write_layouts(tmp / "mail", corpus_messages() + _thread_replies())


Case = Callable[[Path], None]


def _prepare(tmp: Path, name: str, source: str | Path, **options: object) -> None:
    settings: dict[str, object] = {"seed": 1, "split": (0.7, 0.15, 0.15), "workers": 1, **options}
    seqlab.prepare(source, tmp / name, **settings)


CASES: dict[str, Case] = {
    "synthetic-byte": lambda tmp: _prepare(tmp, "synthetic-byte", "synthetic", count=60),
    "synthetic-bpe": lambda tmp: _prepare(tmp, "synthetic-bpe", "synthetic", count=60, tokenizer="bpe",
                                          vocab_size=300),
    "synthetic-options": lambda tmp: _prepare(tmp, "synthetic-options", "synthetic", count=50, keep_quotes=True,
                                              keep_signatures=True, mask_pii=True, limit=45),
    "sender-date": lambda tmp: _prepare(tmp, "sender-date", "synthetic", count=300, senders=[PERSON]),
    "exclude-thread": lambda tmp: _prepare(tmp, "exclude-thread", "synthetic", count=40,
                                           exclude_senders=[PERSON], split_by="thread"),
}


def _layout_case(kind: str) -> Case:
    def run(tmp: Path) -> None:
        _prepare(tmp, kind, _mail_layouts(tmp)[kind], split=(0.6, 0.2, 0.2))
    return run


for _kind in ("mbox", "maildir", "tree", "csv"):
    CASES[_kind] = _layout_case(_kind)


def _reused(tmp: Path) -> None:
    _prepare(tmp, "bpe-source", "synthetic", count=30, tokenizer="bpe", vocab_size=280)
    _prepare(tmp, "tokenizer-from", "synthetic", count=40, seed=2, tokenizer_from=tmp / "bpe-source")


CASES["tokenizer-from"] = _reused


def _relative(value: str, tmp: Path) -> str:
    return value.replace(str(tmp) + "/", "TMP/")


def _normalised(path: Path, tmp: Path) -> bytes:
    """The bytes compared for one file (module docstring: what is normalised and why)."""
    data = path.read_bytes()
    if path.name == "meta.json":
        meta = json.loads(data)
        meta.pop("prepare", None)
        meta.pop("seqlab_version", None)
        meta["source"] = _relative(meta["source"], tmp)
        if "from" in meta["tokenizer"]:
            meta["tokenizer"]["from"] = _relative(meta["tokenizer"]["from"], tmp)
        return json.dumps(meta, indent=2, sort_keys=True).encode()
    if path.name == "emails.jsonl":
        return _relative(data.decode("utf-8"), tmp).encode("utf-8")
    return data


def digests(data_dir: Path, tmp: Path) -> dict[str, str]:
    """sha256 of every file in a DATA_DIR, normalised (above), by file name."""
    return {p.name: hashlib.sha256(_normalised(p, tmp)).hexdigest() for p in sorted(data_dir.iterdir())
            if p.name != "sources.json"}


def build(name: str, tmp: Path) -> dict[str, str]:
    CASES[name](tmp)
    return digests(tmp / name, tmp)


@pytest.mark.parametrize("name", sorted(CASES))
def test_data_dir_bytes_unchanged(name: str, tmp_path: Path) -> None:
    golden = json.loads(GOLDEN.read_text(encoding="utf-8"))
    assert build(name, tmp_path) == golden[name]


if __name__ == "__main__":  # python tests/test_data_dir_golden.py --write
    import tempfile

    if sys.argv[1:] != ["--write"]:
        sys.exit("usage: python tests/test_data_dir_golden.py --write")
    table = {}
    for case in sorted(CASES):
        with tempfile.TemporaryDirectory() as folder:
            table[case] = build(case, Path(folder))
    GOLDEN.parent.mkdir(exist_ok=True)
    GOLDEN.write_text(json.dumps(table, indent=2, sort_keys=True) + "\n", encoding="utf-8")
