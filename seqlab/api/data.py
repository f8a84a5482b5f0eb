"""`seqlab.prepare` and `DataDir`: mail in, a prepared DATA_DIR out, from Python.

This is the one path `seqlab prepare` takes too (`seqlab/cli/data.py` parses arguments, calls `prepare`
and prints `DataDir.report()`). Like the data side below it, this module never imports torch: preparing
mail stays light (`tests/test_api.py` checks it); `DataDir.windows` imports it only when called.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from seqlab.data.prepare.options import PrepareConfig
from seqlab.errors import UserError
from seqlab.private_files import private_umask, warn_if_open

if TYPE_CHECKING:
    from torch import Tensor

    from seqlab.data.mail.imap_auth import ImapOptions
    from seqlab.data.mail.thunderbird import ThunderbirdMail
    from seqlab.data.tokenizer import Tokenizer

SPLITS = ("train", "val", "test")


@dataclass(frozen=True)
class DataDir:
    """A prepared DATA_DIR (ARCHITECTURE.md, "DATA_DIR"): its path and its `meta.json`.

    `DataDir.open(path)` reads one written earlier; `prepare` returns one. `str(data_dir)` is the path, so a
    DataDir goes wherever a path does (`seqlab.train(data_dir, ...)`).
    """

    path: Path
    meta: dict[str, Any]

    @classmethod
    def open(cls, path: str | Path) -> DataDir:
        """The DATA_DIR at `path`; `UserError` when it holds no readable `meta.json`."""
        from seqlab.data.store import load_meta

        return cls(Path(path), load_meta(Path(path)))

    def __str__(self) -> str:
        return str(self.path)

    def __fspath__(self) -> str:
        return str(self.path)

    @property
    def splits(self) -> dict[str, dict[str, int]]:
        """Per split (train, val, test): emails, threads, tokens and bytes."""
        return dict(self.meta["splits"])

    @property
    def vocab_size(self) -> int:
        """How many token ids the tokenizer has (byte: 256 plus the specials)."""
        return int(self.meta["tokenizer"]["vocab_size"])

    def tokenizer(self) -> Tokenizer:
        """The folder's tokenizer (byte or BPE), as `prepare` fitted it on the train split."""
        from seqlab.data.tokenizer import load_tokenizer

        return load_tokenizer(self.path / "tokenizer.json")

    def report(self) -> str:
        """The corpus report `seqlab prepare` prints: emails per split, skips by reason, duplicates, tokens, and
        what the last `--update` added."""
        from seqlab.data.prepare.meta_report import format_report, format_update

        report = format_report(self.meta)
        return report + "\n\n" + format_update(self.meta) if "update" in self.meta else report

    def texts(self, split: str = "train", limit: int | None = None) -> list[str]:
        """The emails of `split` as text (decoded from their tokens), at most `limit` of them."""
        from seqlab.data.store import TokenStore

        store = TokenStore(self.path, _split(split))
        tok = self.tokenizer()
        count = store.num_emails if limit is None else min(limit, store.num_emails)
        return [tok.decode(store.email(i).tolist()) for i in range(count)]

    def windows(self, split: str = "train", *, block_size: int = 64, batch_size: int = 8,
                seed: int = 0) -> Iterator[tuple[Tensor, Tensor]]:
        """Endless training batches (x, y), each (batch_size, block_size) token ids, y = x shifted by one, drawn
        inside emails exactly as the trainer draws them for attention (`seqlab.data.batches.WindowSampler`):
        batch i is a function of (seed, i) alone. For a training loop of your own."""
        from seqlab.data.batches import WindowSampler
        from seqlab.data.store import TokenStore

        if block_size < 1 or batch_size < 1:
            raise UserError(f"block_size and batch_size must be at least 1, not {block_size} and {batch_size}.")
        sampler = WindowSampler(TokenStore(self.path, _split(split)), block_size, batch_size, seed,
                                self.tokenizer().pad_id)
        step = 0
        while True:
            yield sampler.batch(step)
            step += 1


def _split(name: str) -> str:
    if name not in SPLITS:
        raise UserError(f"split must be train, val or test, not {name!r}.")
    return name


def check_split_fractions(split: Sequence[float]) -> tuple[float, float, float]:
    """The train, val and test fractions as a tuple; `UserError` unless they are three non-negative numbers
    that sum to 1 (the same rule as `seqlab prepare --split`)."""
    try:
        parts = tuple(float(p) for p in split)
    except (TypeError, ValueError):
        raise UserError(f"split expects three fractions like (0.9, 0.05, 0.05), not {split!r}.") from None
    if len(parts) != 3 or any(not p >= 0 for p in parts) or not math.isclose(sum(parts), 1.0, abs_tol=1e-6):
        raise UserError(f"split expects three non-negative fractions that sum to 1, not {split!r}.")
    return parts  # type: ignore[return-value]


@private_umask()
def prepare(source: str | Path, out: str | Path, *, tokenizer: str | None = PrepareConfig.tokenizer,
            vocab_size: int | None = PrepareConfig.vocab_size,
            tokenizer_from: str | Path | None = PrepareConfig.tokenizer_from,
            split: Sequence[float] = PrepareConfig.split, seed: int = PrepareConfig.seed,
            keep_quotes: bool = PrepareConfig.keep_quotes, keep_signatures: bool = PrepareConfig.keep_signatures,
            mask_pii: bool = PrepareConfig.mask_pii, limit: int | None = PrepareConfig.limit,
            count: int = PrepareConfig.count, groups: Sequence[str] | None = PrepareConfig.groups,
            cache_dir: str | Path | None = None, workers: int | None = None,
            senders: Sequence[str] = PrepareConfig.senders,
            exclude_senders: Sequence[str] = PrepareConfig.exclude_senders,
            split_by: str | None = PrepareConfig.split_by, folders: Sequence[str] | None = PrepareConfig.folders,
            progress: bool = False, password_command: str | None = None, oauth2: bool = False,
            ca_file: str | Path | None = None, insecure: bool = False, update: bool = False) -> DataDir:
    """Read mail from `source`, clean, dedupe, split by thread, fit a tokenizer on train, write DATA_DIR `out`.

    `source` is a path (mbox, Maildir, folder of message files, Enron tree, CSV, one message), a named
    corpus: "synthetic" (generated offline, `count` emails) or "spamassassin" (`groups`, cached in
    `cache_dir`), or a Thunderbird profile: "thunderbird" (the default one) or "thunderbird:PROFILE" (by name
    or folder), reading `folders` (names such as "Inbox"; default: all but Trash and Junk; see `thunderbird`).
    The options are those of `seqlab prepare`: `tokenizer` "byte" (default) or "bpe" with `vocab_size` (default
    4096), or `tokenizer_from` (a RUN_DIR, DATA_DIR or tokenizer.json) to reuse one;
    `split` the train/val/test fractions; `seed` the split's seed; `limit` messages read at most; `workers`
    parsing processes; `senders` / `exclude_senders` keep or drop mail From those addresses; `split_by`
    "thread" (a seeded hash of each thread) or "date" (earlier threads train, the latest are held out, at
    least 10 emails each), by default "date" with `senders` (one person's mail) and "thread" without. `progress`
    shows a bar on stderr. An IMAP source, "imaps://USER@HOST[:PORT]/FOLDER[,FOLDER...]" (docs/data.md, "IMAP"),
    logs in with the password (or, with `oauth2`, the access token) from SEQLAB_IMAP_PASSWORD (SEQLAB_IMAP_TOKEN),
    else `password_command`'s first line, else a prompt on a terminal; `ca_file` trusts a private CA; `insecure`
    allows imap:// without TLS to this machine only. Bad options are a `UserError` with the CLI's sentence.
    Every file written is readable by this user only (0600, folders 0700); an `OpenToOthersWarning` names
    `tokenizer_from` or the corpus cache when other users can read it.

    `update=True` grows the DATA_DIR `out` instead (`seqlab prepare SOURCE --update DATA_DIR`, docs/data.md, "A
    DATA_DIR that grows"): only the mail of `source` it does not hold is added, with the folder's own tokenizer and
    settings (the options that would change them are refused), and `meta["update"]` says what was added.
    """
    if update:
        _check_update_options(tokenizer=tokenizer, vocab_size=vocab_size, tokenizer_from=tokenizer_from,
                              split=tuple(split) != PrepareConfig.split, seed=seed != PrepareConfig.seed,
                              keep_quotes=keep_quotes, keep_signatures=keep_signatures, mask_pii=mask_pii, limit=limit,
                              senders=tuple(senders), exclude_senders=tuple(exclude_senders), split_by=split_by)
    fractions = _check_options(split, split_by, tokenizer, vocab_size=vocab_size, limit=limit, count=count)
    chosen = _folders(source, folders)
    imap = _imap_options(str(source), password_command, oauth2, ca_file, insecure)
    _check_reused(tokenizer_from, tokenizer, vocab_size)
    warn_if_open(tokenizer_from, _corpus_cache(str(source), cache_dir))
    run = {"workers": workers, "progress": progress, "imap": imap,
           "cache_dir": Path(cache_dir) if cache_dir is not None else None}
    if update:
        from seqlab.data.prepare.grow import update as grow

        return DataDir(Path(out), grow(str(source), Path(out), folders=chosen, **run))
    from seqlab.data.prepare.pipeline import prepare as build

    config = PrepareConfig(str(source), tokenizer=tokenizer, vocab_size=vocab_size, tokenizer_from=tokenizer_from,
                           split=fractions, split_by=split_by, seed=seed, keep_quotes=keep_quotes,
                           keep_signatures=keep_signatures, mask_pii=mask_pii, senders=senders,
                           exclude_senders=exclude_senders, limit=limit, count=count,
                           groups=tuple(groups) if groups else None, folders=chosen)
    return DataDir(Path(out), build(config, Path(out), **run))


def _folders(source: str | Path, folders: Sequence[str] | None) -> tuple[str, ...] | None:
    """The Thunderbird folders `prepare` reads (None: the default ones); a `UserError` for another source."""
    if isinstance(folders, str):  # a bare string would otherwise be read letter by letter
        folders = [folders]
    if folders and not is_thunderbird_source(str(source)):
        raise UserError(f"--folders chooses Thunderbird folders; {str(source)!r} is not a Thunderbird source.")
    return tuple(folders) if folders else None


def _check_options(split: Sequence[float], split_by: str | None, tokenizer: str | None,
                   **counts: int | None) -> tuple[float, float, float]:
    """`prepare`'s options that need no file, checked (a `UserError` names the bad one); the split fractions."""
    if split_by not in (None, "thread", "date"):
        raise UserError(f"split_by must be thread or date, not {split_by!r}.")
    fractions = check_split_fractions(split)
    if tokenizer not in (None, "byte", "bpe"):
        raise UserError(f"tokenizer must be byte or bpe, not {tokenizer!r}.")
    for name, value in counts.items():
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise UserError(f"{name} must be a positive integer, not {value!r}.")
    return fractions


def is_thunderbird_source(source: str | Path) -> bool:
    """True for the sources `thunderbird` and `thunderbird:PROFILE`."""
    from seqlab.data.mail.thunderbird import is_thunderbird_source as check

    return not isinstance(source, Path) and check(str(source))


def thunderbird(source: str = "thunderbird", folders: Sequence[str] | None = None) -> ThunderbirdMail:
    """The Thunderbird profile `source` names ("thunderbird": the default one; "thunderbird:NAME" by its name in
    profiles.ini, or "thunderbird:PATH" by its folder) and the folders `prepare` would read from it: `.profile`,
    `.folders` (read), `.left_out` (Trash and Junk, or what `folders` did not name), `.counts()` (messages and
    deleted messages per folder) and `.listing()` (what `seqlab prepare thunderbird` prints). `UserError` when
    no Thunderbird is found (naming the folders looked in) or no profile has that name (naming the profiles)."""
    from seqlab.data.mail.thunderbird import thunderbird_mail

    if isinstance(folders, str):
        folders = [folders]
    return thunderbird_mail(source, folders)


def _imap_options(source: str, password_command: str | None, oauth2: bool, ca_file: str | Path | None,
                  insecure: bool) -> ImapOptions | None:
    """The IMAP login options, checked with the URL before anything is read; `UserError` when they are given
    for a source that is not an IMAP URL."""
    from seqlab.data.mail.imap import check_transport
    from seqlab.data.mail.imap_auth import ImapOptions
    from seqlab.data.mail.imap_url import is_imap_url, parse_imap_url

    if not is_imap_url(source):
        given = [flag for flag, value in (("--password-command", password_command), ("--oauth2", oauth2),
                                          ("--ca-file", ca_file), ("--insecure", insecure)) if value]
        if given:
            raise UserError(f"{given[0]} is for an IMAP source (imaps://USER@HOST/FOLDER), not {source!r}.")
        return None
    options = ImapOptions(ca_file=str(ca_file) if ca_file is not None else None, insecure=insecure,
                          password_command=password_command, oauth2=oauth2)
    check_transport(parse_imap_url(source), options)
    return options


def _check_update_options(**given: object) -> None:
    """An update keeps the folder's own settings: an option that would change them is refused (UserError)."""
    named = [name for name, value in given.items() if value not in (None, False, ())]
    if named:
        flags = ", ".join("--" + n.replace("_", "-").removesuffix("s") if n.endswith("senders")
                          else "--" + n.replace("_", "-") for n in named)
        raise UserError(f"--update keeps the data folder's own settings and tokenizer; leave out {flags}.")


def _corpus_cache(source: str, cache_dir: str | Path | None) -> Path | None:
    """The cache folder a named corpus is read from (None for the person's own mail, which is theirs)."""
    if source != "spamassassin":
        return None
    from seqlab.data.mail.sources import default_cache_dir

    return Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()


def _check_reused(tokenizer_from: str | Path | None, tokenizer: str | None, vocab_size: int | None) -> None:
    """`tokenizer_from`, when given, checked against `tokenizer` / `vocab_size` when those were also given
    (UserError)."""
    if tokenizer_from is None:
        return
    from seqlab.data.prepare.reuse_tokenizer import reused_tokenizer

    path = Path(tokenizer_from)
    tok = reused_tokenizer(path, tokenizer)
    if vocab_size is not None and vocab_size != tok.vocab_size:
        raise UserError(f"--vocab-size {vocab_size} disagrees with --tokenizer-from {path}, whose vocabulary has "
                        f"{tok.vocab_size} tokens; leave --vocab-size out.")
