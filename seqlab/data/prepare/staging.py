"""The DATA_DIR is complete or absent: `prepare` builds it in a hidden sibling folder (`staging_folder`)
that replaces `--out` only at the end (`publish`), so a crash, Ctrl-C or a full disk leaves `--out` as it
was (absent, or an earlier prepare's complete folder; `discard`). `--out` may be new, empty, or an earlier
prepare's folder; a folder holding anything else is refused rather than replaced.
"""

from __future__ import annotations

import os
import secrets
import shutil
from pathlib import Path

from seqlab.data.layout import SPLITS
from seqlab.data.prepare.spool import CONTEXT_SPOOL_FILE, SPOOL_FILE
from seqlab.durable import DiskFullError, fsync_dir, is_disk_full
from seqlab.errors import UserError
from seqlab.fault_injection import kill_point
from seqlab.private_files import DIR_MODE, make_private_dirs

__all__ = ["discard", "publish", "staging_folder"]

# What an earlier prepare may have left in --out (older versions wrote in place, temporaries included):
# a folder holding only these may be replaced.
_EXTS = ("bin", "idx", "ctx.bin", "ctx.idx")
_OURS = ({f"{s}.{ext}" for s in SPLITS for ext in _EXTS} | {"tokenizer.json", "emails.jsonl", "meta.json",
         "seen.bin", "sources.json",
         SPOOL_FILE, CONTEXT_SPOOL_FILE, "meta.json.tmp", "tokenizer.json.tmp"}
         | {f".{s}.{ext}.tmp" for s in SPLITS for ext in _EXTS})


def staging_folder(out: Path) -> Path:
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
        make_private_dirs(parent)  # the person's own folders as they are, the ones made here 0700
        staging.mkdir(mode=DIR_MODE)  # the DATA_DIR itself once published: only its owner may open it
    except OSError as exc:
        raise UserError(f"--out {out} cannot be created ({exc.strerror})") from None
    return staging


def publish(staging: Path, out: Path) -> None:
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


def discard(staging: Path, out: Path, exc: BaseException) -> None:
    """Remove the staging folder after `exc` stopped `prepare`; a full disk becomes one UserError sentence
    naming `--out` (the caller re-raises anything else)."""
    shutil.rmtree(staging, ignore_errors=True)
    if isinstance(exc, DiskFullError) or is_disk_full(exc):
        where = exc.path.name if isinstance(exc, DiskFullError) else "the spool"
        state = "an earlier prepare's folder was kept as it was" if out.exists() else "nothing was written"
        raise UserError(f"cannot write {out}: no space left on the device (while writing {where}); "
                        f"{state}") from None
