"""What seqlab prints for a person to type runs as printed: `.venv/bin/seqlab serve RUN` when started as
`.venv/bin/seqlab`, `seqlab ...` when PATH finds it, `PYTHON -m seqlab ...` when started as a module."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from seqlab.printed_command import printed_command


def _script(folder: Path, name: str = "seqlab") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text("#!/bin/sh\n")
    path.chmod(0o755)
    return path


@pytest.fixture
def no_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A PATH that finds nothing, and the cwd in a fresh folder."""
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_a_script_under_the_cwd_is_printed_relative(no_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _script(no_path / ".venv" / "bin")
    monkeypatch.setattr(sys, "argv", [".venv/bin/seqlab", "demo"])
    assert printed_command("serve", Path("out/demo/runs/gru")) == ".venv/bin/seqlab serve out/demo/runs/gru"
    monkeypatch.setattr(sys, "argv", [str(no_path / ".venv" / "bin" / "seqlab"), "demo"])  # as the shell passes it
    assert printed_command("serve", "out/run") == ".venv/bin/seqlab serve out/run"


def test_a_script_in_the_cwd_itself_is_not_left_to_path(no_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _script(no_path)
    monkeypatch.setattr(sys, "argv", [str(no_path / "seqlab")])
    assert printed_command("forget", "run") == "./seqlab forget run"


def test_a_script_found_on_path_is_printed_bare(no_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = no_path / ".venv" / "bin"
    monkeypatch.setattr(sys, "argv", [str(_script(bin_dir))])
    monkeypatch.setenv("PATH", str(bin_dir))
    assert printed_command("calibrate", "out/run") == "seqlab calibrate out/run"


def test_a_script_elsewhere_is_printed_absolute(no_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    script = _script(no_path / "tools" / "bin")
    monkeypatch.chdir(no_path / "empty-bin")
    monkeypatch.setattr(sys, "argv", [str(script)])
    assert printed_command("serve", "my runs/gru") == f"{script} serve 'my runs/gru'"


def test_a_module_run_prints_python_m_seqlab(no_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    python = _script(no_path / ".venv" / "bin", "python")
    monkeypatch.setattr(sys, "argv", [str(Path(__file__).parent.parent / "seqlab" / "__main__.py")])
    monkeypatch.setattr(sys, "executable", str(python))
    assert printed_command("phrases", "out/run") == ".venv/bin/python -m seqlab phrases out/run"
    monkeypatch.setattr(sys, "argv", ["-c"])  # the Python API, from `python -c` or a notebook
    assert printed_command("phrases", "out/run") == ".venv/bin/python -m seqlab phrases out/run"


def test_a_printed_command_runs_as_printed(tiny_run_dir: Path, tmp_path: Path) -> None:
    """Through `.venv/bin/seqlab` in a subprocess: `complete --phrases` on a run without a phrase file says
    which command fits it; that line, run by the shell from the same folder with the same PATH, works."""
    venv = Path(sys.executable).parent.parent
    if not (venv / "bin" / "seqlab").is_file():
        pytest.skip("the seqlab console script is not installed beside this Python")
    (tmp_path / ".venv").symlink_to(venv)  # the checkout's own .venv, as `make venv` makes it
    shutil.copytree(tiny_run_dir, tmp_path / "run")
    complete = ".venv/bin/seqlab complete run 'Hi Dana, could you send me the' --phrases"
    done = subprocess.run(complete, shell=True, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr
    printed = re.search(r"fit it with `([^`]+)`", done.stderr)
    assert printed, done.stderr
    assert printed.group(1) in (".venv/bin/seqlab phrases run", "seqlab phrases run"), printed.group(1)
    fit = subprocess.run(printed.group(1), shell=True, cwd=tmp_path, capture_output=True, text=True, timeout=300,
                         env=os.environ.copy())
    assert fit.returncode == 0, fit.stderr
    assert (tmp_path / "run" / "phrases.npz").is_file()
    again = subprocess.run(complete, shell=True, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr
