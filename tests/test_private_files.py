"""Files only the person can read: under the usual umask 022, everything `prepare`, `train`, `calibrate`,
`phrases` and `serve` write is 0600 and every folder 0700; another user of the machine reads none of it; a
folder made the old way (readable by others) gets one warning line naming it and a command that fixes it.
"""

from __future__ import annotations

import io
import os
import shutil
import stat
import subprocess
import tarfile
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from preparing import prepare
from serving_helpers import served
from trainers import tiny_trainer

import seqlab
from seqlab.cli.main import main
from seqlab.data.mail import sources
from seqlab.private_files import OpenToOthersWarning

# Another user of the machine, as the kernel sees one: uid and gid 65534 (nobody), no supplementary groups.
AS_NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
TINY = ["--preset", "tiny", "train.threads=1", "--quiet"]
AGAIN = ["prepare", "synthetic", "--count", "30", "--quiet", "--out"]


@contextmanager
def umask(mask: int) -> Iterator[None]:
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)


def current_umask() -> int:
    old = os.umask(0o022)
    os.umask(old)
    return old


def modes(*roots: Path) -> dict[str, str]:
    """Every folder and file under `roots` (themselves included) whose mode is not 0700 / 0600: path -> mode."""
    wrong = {}
    for root in roots:
        for folder, _, files in os.walk(root):
            for path, want in [(Path(folder), 0o700)] + [(Path(folder) / f, 0o600) for f in files]:
                st = os.lstat(path)
                if not stat.S_ISLNK(st.st_mode) and stat.S_IMODE(st.st_mode) != want:
                    wrong[str(path)] = f"{stat.S_IMODE(st.st_mode):04o}"
    return wrong


def open_up(root: Path) -> None:
    """Make `root` as the umask 022 used to leave it: folders 0755, files 0644."""
    for folder, _, files in os.walk(root):
        os.chmod(folder, 0o755)
        for f in files:
            os.chmod(Path(folder) / f, 0o644)


def warning_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("seqlab: warning:") and "other users" in line]


def run_fix(line: str) -> None:
    """Run the command the warning prints, as printed, through a shell."""
    command = line.split("run: ", 1)[1]
    subprocess.run(command, shell=True, check=True)


@pytest.fixture(scope="module")
def written() -> Iterator[tuple[Path, Path, Path]]:
    """(shared, DATA_DIR, RUN_DIR): `seqlab prepare`, `train`, `calibrate`, `phrases` and `attention` (a plot
    of a text) run under umask 022 in a folder every user may enter (0755; pytest's own temporary folders are
    0700, which would hide the files from another user whatever their modes). Also an `old.txt` written there
    the usual way."""
    # /tmp (1777), not $TMPDIR, which may sit in a folder only its owner can enter
    shared = Path(tempfile.mkdtemp(prefix="seqlab-shared-", dir="/tmp" if os.path.isdir("/tmp") else None))
    try:
        shared.chmod(0o755)
        data, run = shared / "mail" / "data", shared / "run"
        with umask(0o022):
            assert main(["prepare", "synthetic", "--out", str(data), "--count", "30", "--quiet"]) == 0
            assert main(["train", str(data), "--out", str(run), *TINY, "train.max_steps=4", "train.eval_every=2",
                         "train.ckpt_every=2"]) == 0
            assert main(["calibrate", str(run), "--emails", "3", "--max-words", "2", "--device", "cpu"]) == 0
            assert main(["phrases", str(run), "--min-context", "2", "--max-context", "3"]) == 0
            assert main(["attention", str(run), "Hi Dana, thanks", "--out", str(shared / "plots" / "attn.png")]) == 0
            assert current_umask() == 0o022  # the command's umask did not leak into its caller
            (shared / "old.txt").write_text("written the usual way\n")
        yield shared, data, run
    finally:
        shutil.rmtree(shared)


def test_commands_write_only_private_files_under_umask_022(written: tuple[Path, Path, Path]) -> None:
    shared, data, run = written
    names = {p.name for p in [*data.rglob("*"), *run.rglob("*")]}
    for name in ("emails.jsonl", "train.bin", "tokenizer.json", "model.safetensors", "best", "checkpoints",
                 "trainer_state.pt", "metrics.jsonl", "run.json", "calibration.json", "phrases.npz"):
        assert name in names, name  # the walk below covers each kind of file
    assert (shared / "plots" / "attn.png").is_file()
    assert modes(data.parent, run, shared / "plots") == {}  # the folders seqlab made on the way too


@pytest.mark.skipif(os.name == "nt" or os.geteuid() != 0 or shutil.which("setpriv") is None,
                    reason="reading as another user needs root and setpriv")
def test_another_user_reads_nothing(written: tuple[Path, Path, Path]) -> None:
    shared, data, run = written

    def cat(path: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*AS_NOBODY, "cat", str(path)], capture_output=True, text=True)

    old = cat(shared / "old.txt")  # the attack works on a file written the usual way: the check can fail
    assert old.returncode == 0 and old.stdout == "written the usual way\n"
    for path in (data / "emails.jsonl", data / "train.bin", run / "model.safetensors",
                 run / "best" / "model.safetensors", run / "phrases.npz"):
        got = cat(path)
        assert got.returncode != 0 and "Permission denied" in got.stderr and got.stdout == "", path
    listing = subprocess.run([*AS_NOBODY, "ls", str(data)], capture_output=True, text=True)
    assert listing.returncode != 0 and "Permission denied" in listing.stderr


def test_the_library_writes_private_files_without_the_cli(tiny_data_dir: Path, tmp_path: Path) -> None:
    """Code below the CLI and the API (the prepare pipeline, the trainer) sets the modes itself."""
    with umask(0o022):
        prepare("synthetic", tmp_path / "data", count=30, seed=0, progress=False)
        tiny_trainer(tiny_data_dir, tmp_path / "a" / "run", "train.max_steps=2", "train.eval_every=1").run()
    assert (tmp_path / "a" / "run" / "best" / "model.safetensors").is_file()
    assert modes(tmp_path / "data", tmp_path / "a") == {}


def test_train_and_prepare_warn_of_an_open_data_dir(tiny_data_dir: Path, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "old data"  # a space: the printed command must quote it
    shutil.copytree(tiny_data_dir, data)
    open_up(data)
    capsys.readouterr()
    assert main([*AGAIN, str(tmp_path / "again"), "--tokenizer-from", str(data)]) == 0
    assert main(["train", str(data), "--out", str(tmp_path / "run"), *TINY, "train.max_steps=1"]) == 0
    lines = warning_lines(capsys.readouterr().err)
    assert len(lines) == 2 and lines[0] == lines[1], lines
    assert lines[0] == (f"seqlab: warning: {data} can be read by other users of this machine (it is mode 0755); "
                        f"to make it yours only, run: chmod -R go= '{data}'")
    run_fix(lines[0])
    assert modes(data) == {}
    assert main([*AGAIN, str(tmp_path / "again"), "--tokenizer-from", str(data)]) == 0
    assert main(["train", str(data), "--out", str(tmp_path / "run2"), *TINY, "train.max_steps=1"]) == 0
    assert warning_lines(capsys.readouterr().err) == []


def test_a_file_open_inside_a_private_folder_is_named(tiny_data_dir: Path, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "data"
    shutil.copytree(tiny_data_dir, data)
    (data / "emails.jsonl").chmod(0o644)
    assert main([*AGAIN, str(tmp_path / "again"), "--tokenizer-from", str(data)]) == 0
    (line,) = warning_lines(capsys.readouterr().err)
    assert f"({data / 'emails.jsonl'} is mode 0644)" in line and line.endswith(f"chmod -R go= {data}")


def test_serve_warns_of_an_open_run_dir(tiny_run_dir: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(tiny_run_dir, run)
    open_up(run)
    with served(run, tmp_path / "log") as server:
        assert server.get("/health") is not None
    (line,) = warning_lines(server.log.read_text())
    assert line.startswith(f"seqlab: warning: {run} can be read by other users") and line.endswith(f"go= {run}")
    run_fix(line)
    with umask(0o022), served(run, tmp_path / "log2") as server:
        assert server.get("/health") is not None
    assert warning_lines(server.log.read_text()) == []
    assert modes(run, tmp_path / "log2") == {}  # what the server wrote (its log, server.json) is private too


def test_the_api_warns_instead_of_printing(tiny_data_dir: Path, tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "data"
    shutil.copytree(tiny_data_dir, data)
    open_up(data)
    with umask(0o022), pytest.warns(OpenToOthersWarning, match="chmod -R go= ") as caught:
        seqlab.prepare("synthetic", tmp_path / "again", count=30, tokenizer_from=data)
    assert [w.filename for w in caught] == [__file__]  # it points at the caller's line, not seqlab's
    assert str(caught[0].message).startswith(f"{data} can be read by other users")
    assert "seqlab: warning" not in capsys.readouterr().err  # nothing printed unless asked
    assert modes(tmp_path / "again") == {}  # the API's own umask, not the caller's 022
    assert current_umask() == 0o022


def _tarball(path: Path, messages: int) -> Path:
    """A package laid out like the SpamAssassin one, members mode 0644 as npm packs them."""
    with tarfile.open(path, "w:gz") as tf:
        for n in range(messages):
            data = (f"From: a{n}@example.com\nTo: b@example.com\nSubject: note {n}\nMessage-ID: <{n}@example.com>\n\n"
                    f"Body {n}: the meeting moved to room {n}, see you there.\n").encode()
            info = tarfile.TarInfo(f"package/data/easy-ham-1/{n:05d}.txt")
            info.size, info.mode = len(data), 0o644
            tf.addfile(info, io.BytesIO(data))
    return path


def test_the_corpus_cache_is_private_and_an_old_one_warns(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    tarball = _tarball(tmp_path / "corpus.tgz", 40)
    monkeypatch.setattr(sources, "SPAMASSASSIN_SHA256", sources.sha256_file(tarball))
    monkeypatch.setenv(sources.ENV_LOCAL, str(tarball))
    cache = tmp_path / "home" / ".cache" / "seqlab"
    prepare_sa = ["prepare", "spamassassin", "--out", str(tmp_path / "data"), "--cache-dir", str(cache),
                  "--groups", "easy-ham-1", "--quiet"]
    with umask(0o022):
        assert main(prepare_sa) == 0
    assert warning_lines(capsys.readouterr().err) == []
    assert len(list((cache / "spamassassin" / "easy-ham-1" / "easy-ham-1").iterdir())) == 40  # KEY/GROUP
    assert modes(tmp_path / "home", tmp_path / "data") == {}  # the extracted mail, the marker, the lock
    open_up(cache)  # as the cache was before: extracted 0755 to be shared
    assert main(prepare_sa) == 0
    (line,) = warning_lines(capsys.readouterr().err)
    assert line.startswith(f"seqlab: warning: {cache} can be read") and line.endswith(f"chmod -R go= {cache}")
