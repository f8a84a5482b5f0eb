"""`PrepareConfig`: everything that decides the bytes of a DATA_DIR, typed, checked once, saved in meta.json.

`seqlab prepare`'s flags and `seqlab.prepare(...)`'s keyword arguments build one; `pipeline.prepare` takes it
with the settings that change how the work is done but never what is written (worker processes, the
download cache, the progress bar). Saved under `prepare` in meta.json (`as_meta`), so a DATA_DIR says exactly
how it was made; a folder written before the key existed still loads (nothing reads it back).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from seqlab.data.mail.clean import CleanOptions
from seqlab.data.mail.mime import parse_addresses
from seqlab.errors import UserError

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

    source: str
    tokenizer: TokenizerKind = "byte"
    vocab_size: int = 4096
    tokenizer_from: str | None = None
    split: tuple[float, float, float] = (0.9, 0.05, 0.05)
    split_by: SplitBy | None = None
    seed: int = 0
    keep_quotes: bool = False
    keep_signatures: bool = False
    mask_pii: bool = False
    senders: tuple[str, ...] = ()
    exclude_senders: tuple[str, ...] = ()
    limit: int | None = None
    count: int = 2000
    groups: tuple[str, ...] | None = None
    folders: tuple[str, ...] | None = None
    clean: CleanOptions = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # frozen: the normalised values are set once here, through object.__setattr__
        set_ = object.__setattr__
        set_(self, "source", str(self.source))
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
