"""Breaking the files a command reads: a DATA_DIR or RUN_DIR with a damaged tokenizer.json, meta.json, .idx
or .bin, or a tokenizer that does not belong to the data. Every command that reads it (`train`, `eval`,
`complete`, `train --resume`, and `serve`, whose /health says why it failed) must stop with exit code 2
and one sentence naming the damaged file: never a traceback, never numbers computed from nonsense.

Damage kinds: truncated to 0 bytes, cut in half, the same length of random bytes, valid JSON of the wrong
types, .idx offsets out of order, past the end of .bin or short of whole emails, a .bin whose length is not
a whole number of ids or that holds an id outside the vocabulary, and a valid tokenizer of the same
vocabulary size that is not the one the data was encoded with (byte-level BPE with no merges: 259 ids,
but in another order than bytes).
"""

from __future__ import annotations

import hashlib
import json
import random
import shutil
import threading
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from serving_helpers import person_client

from seqlab.cli.main import main as cli_main
from seqlab.data.prepare.tokenizer_fit import fit_tokenizer
from seqlab.serving.app import ServerConfig


def _truncate(path: Path) -> None:
    path.write_bytes(b"")


def _half(path: Path) -> None:
    blob = path.read_bytes()
    path.write_bytes(blob[: len(blob) // 2])


def _random(path: Path) -> None:
    path.write_bytes(random.Random(path.name).randbytes(path.stat().st_size))


def _json(value: object) -> Callable[[Path], None]:
    def damage(path: Path) -> None:
        path.write_text(json.dumps(value))
    return damage


def _nested(path: Path) -> None:
    path.write_text("[" * 100_000)  # json.loads gives up with a RecursionError, not a JSONDecodeError


def _edit_meta(edit: Callable[[dict], None]) -> Callable[[Path], None]:
    def damage(path: Path) -> None:
        meta = json.loads(path.read_text())
        edit(meta)
        path.write_text(json.dumps(meta))
    return damage


def _offsets(edit: Callable[[np.ndarray], np.ndarray]) -> Callable[[Path], None]:
    def damage(path: Path) -> None:
        edit(np.fromfile(path, dtype="<i8")).astype("<i8").tofile(path)
    return damage


def _swap_first(starts: np.ndarray) -> np.ndarray:
    starts[[1, 2]] = starts[[2, 1]]
    return starts


def _past_end(starts: np.ndarray) -> np.ndarray:
    starts[-1] = 10**9
    return starts


def _odd_length(path: Path) -> None:
    with path.open("ab") as f:
        f.write(b"\x00")


def _id_outside_vocab(path: Path) -> None:
    ids = np.fromfile(path, dtype="<u2")
    ids[len(ids) // 2] = 60000
    ids.tofile(path)


def _other_tokenizer(path: Path) -> None:
    path.write_text(fit_tokenizer("bpe", ["no merges at all"], vocab_size=259).to_json())


TOKENIZER = [
    ("truncated", _truncate), ("half", _half), ("random", _random),
    ("wrong-types", _json({"seqlab": {"format": 1, "kind": "byte", "vocab_size": "259", "specials": []}})),
    ("a-list", _json([1, 2])),
    ("nested-too-deep", _nested),
    ("other-tokenizer", _other_tokenizer),
]
META = [
    ("truncated", _truncate), ("half", _half), ("random", _random), ("a-list", _json([])),
    ("nested-too-deep", _nested),
    ("dtype-a-number", _edit_meta(lambda m: m.update(token_dtype=16))),
    ("splits-a-list", _edit_meta(lambda m: m.update(splits=[]))),
    ("counts-text", _edit_meta(lambda m: m["splits"]["val"].update(emails="many"))),
    ("tokenizer-text", _edit_meta(lambda m: m.update(tokenizer="byte"))),
]
IDX = [
    ("truncated", _truncate), ("half", _half), ("random", _random), ("odd-length", _odd_length),
    ("out-of-order", _offsets(_swap_first)), ("past-the-end", _offsets(_past_end)),
    ("last-email-dropped", _offsets(lambda s: s[:-1])),
]
BIN = [
    ("truncated", _truncate), ("half", _half), ("random", _random), ("odd-length", _odd_length),
    ("id-outside-vocab", _id_outside_vocab),
]


def _cases(files: list[str]) -> list[tuple[str, str, Callable[[Path], None]]]:
    table = {"tokenizer.json": TOKENIZER, "meta.json": META}
    return [(name, kind, damage) for name in files
            for kind, damage in table.get(name, IDX if name.endswith(".idx") else BIN)]


DATA_CASES = _cases(["tokenizer.json", "meta.json", "val.idx", "val.bin", "train.idx", "train.bin"])


def _damaged_copy(src: Path, dst: Path, name: str, damage: Callable[[Path], None]) -> Path:
    shutil.copytree(src, dst)
    before = (dst / name).read_bytes()
    damage(dst / name)
    assert (dst / name).read_bytes() != before, "the damage changed nothing"
    return dst / name


def assert_one_sentence_naming(code: int, err: str, path: Path) -> None:
    """Exit 2, no traceback, and the error line names the damaged file."""
    lines = [line for line in err.strip().splitlines() if not line.startswith("seqlab: warning: ")]
    assert code == 2, err
    assert "Traceback" not in err and len(lines) == 1 and lines[0].startswith("seqlab: error: "), err
    assert str(path) in lines[0], f"{path} not named in: {lines[0]}"


@pytest.mark.parametrize(("name", "kind", "damage"), DATA_CASES, ids=[f"{n}-{k}" for n, k, _ in DATA_CASES])
def test_train_on_a_damaged_data_dir(name: str, kind: str, damage: Callable[[Path], None], tiny_data_dir: Path,
                                     tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Old behaviour, by damage (checked on the old code): exit 0, training silently on nonsense, for a
    .idx cut in half, cut short of its last email (the emails after the cut glued into the last one) or
    of a length that is no whole number of offsets (the tail dropped), for a .bin holding an id outside
    the vocabulary (not drawn in 2 steps: a later step would crash), for the BPE tokenizer of 259 ids
    (ids that mean other bytes), and for meta.json of the wrong types (splits a list, counts or the
    tokenizer as text); a .bin of random bytes crashed in the embedding (IndexError traceback), and a
    tokenizer.json or meta.json nested too deep in json.loads (RecursionError traceback); a .bin cut to
    0 bytes was refused naming only the .idx. The other damages were already refused naming the
    file; they guard the new checks."""
    path = _damaged_copy(tiny_data_dir, tmp_path / "data", name, damage)
    code = cli_main(["train", str(tmp_path / "data"), "--out", str(tmp_path / "run"), "--preset", "tiny",
                     "--quiet", "train.threads=1", "train.max_steps=2", "train.eval_every=2"])
    assert_one_sentence_naming(code, capsys.readouterr().err, path)


EVAL_CASES = _cases(["tokenizer.json", "meta.json", "val.idx", "val.bin"])


@pytest.mark.parametrize(("name", "kind", "damage"), EVAL_CASES, ids=[f"{n}-{k}" for n, k, _ in EVAL_CASES])
def test_eval_on_a_damaged_data_dir(name: str, kind: str, damage: Callable[[Path], None], tiny_data_dir: Path,
                                    tiny_run_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Old behaviour, by damage (checked on the old code): as for `train`, scores computed on nonsense
    (exit 0) for the cut .idx files and meta.json of the wrong types, an IndexError traceback for a .bin
    of random bytes or with an id outside the vocabulary, a RecursionError traceback for JSON nested too
    deep, the .bin cut to 0 bytes named only through
    its .idx, and the tokenizer of another order refused naming folders but not the file."""
    path = _damaged_copy(tiny_data_dir, tmp_path / "data", name, damage)
    code = cli_main(["eval", str(tiny_run_dir), "--data", str(tmp_path / "data"), "--completion-emails", "2",
                     "--device", "cpu"])
    assert_one_sentence_naming(code, capsys.readouterr().err, path)


# ------------------------------------------------------------------------------------- a damaged RUN_DIR


def _rehash(ckpt_dir: Path) -> None:
    """Make a manifest vouch for what is in its folder now, as a copy from another run would."""
    manifest = json.loads((ckpt_dir / "manifest.json").read_text())
    for name, entry in manifest["files"].items():
        blob = (ckpt_dir / name).read_bytes()
        entry.update(size=len(blob), sha256=hashlib.sha256(blob).hexdigest())
    (ckpt_dir / "manifest.json").write_text(json.dumps(manifest))


def _damaged_run(src: Path, dst: Path, damage: Callable[[Path], None], vouched: bool) -> list[Path]:
    """Damage tokenizer.json in every checkpoint of a copy of `src` (the mirror, step directories,
    best/); with `vouched`, the manifests are rewritten to match. Returns the damaged files."""
    shutil.copytree(src, dst)
    damaged = sorted(dst.rglob("tokenizer.json"))
    for path in damaged:
        damage(path)
        if vouched:
            _rehash(path.parent)
    return damaged


RUN_DAMAGE = [(kind, damage) for kind, damage in TOKENIZER if kind != "other-tokenizer"]
RUN_CASES = [(kind, damage, vouched) for kind, damage in RUN_DAMAGE for vouched in (False, True)]
RUN_IDS = [f"{kind}-{'vouched' if vouched else 'unvouched'}" for kind, _, vouched in RUN_CASES]


def _run_command(command: str, run: Path, data: Path) -> list[str]:
    return {
        "complete": ["complete", str(run), "Hi Dana,", "--device", "cpu"],
        "eval": ["eval", str(run), "--data", str(data), "--completion-emails", "2", "--device", "cpu"],
        "resume": ["train", str(data), "--out", str(run), "--resume", "--quiet"],
    }[command]


@pytest.mark.parametrize("command", ["complete", "eval", "resume"])
@pytest.mark.parametrize(("kind", "damage", "vouched"), RUN_CASES, ids=RUN_IDS)
def test_commands_on_a_run_dir_with_a_damaged_tokenizer(command: str, kind: str, damage: Callable[[Path], None],
                                                        vouched: bool, tiny_run_dir: Path, tiny_data_dir: Path,
                                                        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Old behaviour (checked on the old code): with every copy damaged the manifests skipped them all
    (a warning naming each file), but the error itself said only that RUN_DIR "holds no usable
    checkpoint; train a model there first" (`train --resume`: "no complete checkpoint"), naming no file.
    Damage a manifest vouched for: `complete` and `eval` already named the file, except for random bytes
    (a UnicodeDecodeError message naming no file) and JSON nested too deep (a RecursionError traceback);
    `train --resume` never read the checkpoint's tokenizer
    and went on (exit 0). Now every error names a damaged tokenizer.json."""
    run = tmp_path / "run"
    damaged = _damaged_run(tiny_run_dir, run, damage, vouched)
    code = cli_main(_run_command(command, run, tiny_data_dir))
    err = capsys.readouterr().err
    lines = [line for line in err.strip().splitlines() if not line.startswith("seqlab: warning: ")]
    assert code == 2 and "Traceback" not in err and len(lines) == 1, err
    assert any(str(path) in lines[0] for path in damaged), lines[0]


@pytest.mark.parametrize(("kind", "damage", "vouched"), RUN_CASES, ids=RUN_IDS)
def test_serve_reports_a_damaged_tokenizer_on_health(kind: str, damage: Callable[[Path], None], vouched: bool,
                                                      tiny_run_dir: Path, tmp_path: Path) -> None:
    """`seqlab serve` loads the run on its model thread; a run that cannot load keeps the server up to say
    why on /health (503, status "failed") and refuses completions. Old behaviour (checked on the old
    code): the same, but with every copy damaged, or random bytes or JSON nested too deep vouched for, the
    reason named no file ("holds no usable checkpoint; train a model there first", "RecursionError: ...").
    Now /health names a damaged tokenizer.json."""
    run = tmp_path / "run"
    damaged = _damaged_run(tiny_run_dir, run, damage, vouched)
    with person_client(ServerConfig(run, log_dir=tmp_path / "log")) as client:
        for _ in range(600):
            health = client.get("/health")
            if health.json()["status"] != "loading":
                break
            threading.Event().wait(0.01)
        body = health.json()
        assert health.status_code == 503 and body["status"] == "failed", body
        assert any(str(path) in body["error"] for path in damaged) and "Traceback" not in body["error"], body
        refused = client.post("/v1/complete", json={"prefix": "Hi"})
        assert refused.status_code == 503 and "failed to load" in refused.json()["error"]
