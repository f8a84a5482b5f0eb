"""`PrepareConfig`: everything that decides the bytes of a DATA_DIR, typed, checked once, saved in meta.json.

Each option is declared once, here: a field holds its default and its `--help` line (`seqlab.options.option`);
`seqlab prepare`'s flags are built from the fields, `seqlab.prepare(...)`'s keyword arguments take their
defaults from them, and `tests/test_cli_options.py` holds the three equal. `pipeline.prepare` takes it
with the settings that change how the work is done but never what is written (worker processes, the
download cache, the progress bar). Saved under `prepare` in meta.json (`as_meta`), so a DATA_DIR says exactly
how it was made; a folder written before the key existed still loads (nothing reads it back).
"""

from __future__ import annotations

from dataclasses import MISSING, asdict, dataclass, field
from typing import Any, Literal

from seqlab.data.mail.clean import CleanOptions
from seqlab.data.mail.mime import parse_addresses
from seqlab.errors import UserError
from seqlab.options import option

__all__ = ["PrepareConfig"]

TokenizerKind = Literal["byte", "bpe"]
SplitBy = Literal["thread", "date"]


@dataclass(frozen=True)
class PrepareConfig:
    """How a DATA_DIR is made from `source` (a path or a named corpus: "synthetic", "spamassassin").

    `tokenizer` and `vocab_size` are not used when `tokenizer_from` (a RUN_DIR, DATA_DIR or tokenizer.json)
    names a tokenizer to reuse. `split_by` is "thread" (a seeded hash of each thread) or "date" (earlier
    threads train, the latest are held out); left None it becomes "date" when `senders` picks one person's
    mail, else "thread". `count` is the synthetic corpus's size, `groups` the SpamAssassin groups, `folders` the
    Thunderbird folders read (None: all but Trash and Junk).
    """

    # Each field's doc is its `seqlab prepare --help` line (`seqlab.cli.options` builds the flags from them).
    source: str = option(MISSING, "path to mail, or 'spamassassin' / 'synthetic' / 'thunderbird[:PROFILE]' / "
                         "'imaps://USER@HOST/FOLDER'")
    # None (not given) becomes byte / 4096 below, so that `tokenizer_from` and `--update` can tell a choice made
    tokenizer: TokenizerKind = option(None, "byte (default) or bpe", choices=("byte", "bpe"))
    vocab_size: int = option(None, "BPE vocabulary size (default 4096)", kind="positive_int")
    tokenizer_from: str | None = option(
        None, "encode with this RUN_DIR's, DATA_DIR's or tokenizer.json's tokenizer instead of fitting one (so "
        "that `train --init` from that run accepts this data)", kind="path", metavar="PATH")
    split: tuple[float, float, float] = option((0.9, 0.05, 0.05), "train,val,test fractions", kind="fractions")
    split_by: SplitBy | None = option(
        None, "thread: a seeded hash of each thread; date: earlier threads train, the latest are held out (val "
        "and test at least 10 emails). Default: date with --sender (one person's mail), else thread",
        choices=("thread", "date"))
    seed: int = option(0, "seed of the thread-to-split hash (default 0)", kind="int")
    keep_quotes: bool = option(False, "keep quoted replies and forwarded text")
    keep_signatures: bool = option(False, "keep signatures after '-- '")
    mask_pii: bool = option(False, "replace email addresses, URLs and phone numbers")
    senders: tuple[str, ...] = option(
        (), "keep only mail From this address (repeatable); others are counted as other_sender", kind="repeated",
        flag="sender", metavar="ADDRESS")
    exclude_senders: tuple[str, ...] = option(
        (), "drop mail From this address (repeatable), counted as excluded_sender", kind="repeated",
        flag="exclude-sender", metavar="ADDRESS")
    limit: int | None = option(None, "read at most N messages", kind="positive_int")
    count: int = option(2000, "emails to generate for 'synthetic'", kind="positive_int")
    # the command line reads `groups` and `folders` as one comma-separated text each
    groups: tuple[str, ...] | None = option(None, "spamassassin groups, comma-separated (default: the ham groups)")
    folders: tuple[str, ...] | None = option(
        None, "thunderbird: only these folders, comma-separated, e.g. Inbox,Sent (default: all but Trash and "
        "Junk)", metavar="NAMES")
    clean: CleanOptions = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # frozen: the normalised values are set once here, through object.__setattr__
        set_ = object.__setattr__
        set_(self, "source", str(self.source))
        set_(self, "tokenizer", self.tokenizer or "byte")
        set_(self, "vocab_size", self.vocab_size or 4096)
        set_(self, "tokenizer_from", None if self.tokenizer_from is None else str(self.tokenizer_from))
        set_(self, "split", tuple(self.split))
        set_(self, "senders", tuple(self.senders))
        set_(self, "exclude_senders", tuple(self.exclude_senders))
        set_(self, "groups", None if self.groups is None else tuple(self.groups))
        set_(self, "folders", tuple(self.folders) if self.folders else None)
        if self.split_by is None:
            set_(self, "split_by", "date" if self.senders else "thread")
        if self.split_by not in ("thread", "date"):
            raise UserError(f"--split-by must be thread or date, not {self.split_by!r}")
        set_(self, "clean", CleanOptions(keep_quotes=self.keep_quotes, keep_signatures=self.keep_signatures,
                                         mask_pii=self.mask_pii, senders=_addresses(self.senders, "--sender"),
                                         exclude_senders=_addresses(self.exclude_senders, "--exclude-sender")))

    def as_meta(self) -> dict[str, Any]:
        """The config as meta.json records it (JSON types: lists for tuples)."""
        out = asdict(self)
        out.pop("clean")
        return {key: list(value) if isinstance(value, tuple) else value for key, value in out.items()}


def _addresses(values: tuple[str, ...], flag: str) -> frozenset[str]:
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
