"""`seqlab prepare SOURCE --update DATA_DIR`: a DATA_DIR grows by the mail it does not hold, nothing else moves.

The mail: an mbox of old threads (roots and replies, some quoting their parent, some only naming it), then
appended to it replies into old threads, new threads, a reply that names an old parent and quotes nothing
(its context is read back from the old token files), and a copy of an old email. Checked against a full
prepare of the whole mbox with the old folder's tokenizer (`tokenizer_from`): same bytes in every token,
context and index file, since appended mail that starts or joins threads moves nothing in either
(seqlab/data/prepare/grow.py says where the two part, and why).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from data_dir_checks import check_data_dir, files_of
from mail_samples import write_mbox

import seqlab
from seqlab.cli.main import main as cli_main

ROOTS = 16
SPLIT = (0.5, 0.25, 0.25)
WORDS = "harbour ledger audit ferry quarry lantern orchard violin meadow copper tunnel saffron glacier".split()


def _text(i: int, n: int = 12) -> str:
    """A body of its own for message i (no two alike, long enough to count for dedupe)."""
    return " ".join(WORDS[(i * 7 + k * 3 + i // 5) % len(WORDS)] + str(i * 31 + k) for k in range(n)) + "."


def _msg(mid: str, subject: str, body: str, reply_to: str | None = None, hour: int = 9) -> bytes:
    head = (f"From: Kim Lee <kim@example.org>\nTo: Sam Roe <sam@example.org>\nSubject: {subject}\n"
            f"Message-ID: <{mid}>\nDate: Tue, 9 Jan 2024 {hour:02d}:00:00 +0000\n")
    if reply_to:
        head += f"In-Reply-To: <{reply_to}>\nReferences: <{reply_to}>\n"
    return (head + "\n" + body + "\n").encode()


def old_mail() -> list[bytes]:
    """ROOTS threads: a root and a reply each; every other reply quotes its root, the rest only name it."""
    msgs = []
    for t in range(ROOTS):
        root = _text(t)
        msgs.append(_msg(f"root{t}@x", f"Plan {t}", root))
        quote = "\n\n> " + root if t % 2 else ""
        msgs.append(_msg(f"re{t}@x", f"Re: Plan {t}", _text(100 + t) + quote, reply_to=f"root{t}@x", hour=10))
    return msgs


def new_mail(old: list[bytes]) -> list[bytes]:
    """Five replies into old threads (naming the old root, quoting nothing), four new threads, one reply in a
    new thread, and a copy of an old email: 11 messages of which 10 are new."""
    msgs = [_msg(f"late{t}@x", f"Re: Plan {t}", _text(200 + t), reply_to=f"root{t}@x", hour=11)
            for t in (0, 3, 5, 8, 13)]
    msgs += [_msg(f"fresh{t}@x", f"Idea {t}", _text(300 + t), hour=12) for t in range(4)]
    msgs.append(_msg("fresh-re@x", "Re: Idea 1", _text(400), reply_to="fresh1@x", hour=13))
    msgs.append(old[4])  # already held
    return msgs


def _append(path: Path, msgs: list[bytes]) -> None:
    """Append to an mbox as a mail client does (an envelope, the message, a blank line)."""
    extra = path.with_name("extra.mbox")
    write_mbox(extra, msgs)
    with open(path, "ab") as f:
        f.write(extra.read_bytes())
    extra.unlink()


def _rows(data: Path) -> list[dict]:
    return [json.loads(line) for line in (data / "emails.jsonl").read_text(encoding="utf-8").splitlines()]


@pytest.fixture
def grown(tmp_path: Path) -> tuple[Path, Path, dict[str, bytes]]:
    """(the mbox, its DATA_DIR, the folder's files before the update); the new mail appended to the mbox."""
    box = write_mbox(tmp_path / "inbox.mbox", old := old_mail())
    data = tmp_path / "data"
    seqlab.prepare(box, data, split=SPLIT, workers=1)
    before = files_of(data)
    _append(box, new_mail(old))
    return box, data, before


@pytest.mark.parametrize("tokenizer", ["byte", "bpe"])
def test_update_adds_exactly_the_new_mail_and_equals_a_full_prepare(tokenizer: str, tmp_path: Path) -> None:
    box = write_mbox(tmp_path / "inbox.mbox", old := old_mail())
    data = tmp_path / "data"
    options = {"tokenizer": tokenizer, "vocab_size": 300} if tokenizer == "bpe" else {}
    seqlab.prepare(box, data, split=SPLIT, workers=1, **options)
    before, old_rows = files_of(data), _rows(data)
    _append(box, new_mail(old))

    grown = seqlab.prepare(box, data, update=True, workers=1)
    meta, rows, _ = check_data_dir(data)
    assert meta["update"]["seen"] == 11 and meta["update"]["added"] == 10 and meta["update"]["held"] == 1
    assert grown.meta == meta and "added 10 emails" in grown.report()
    assert meta["kept"] == len(old_rows) + 10 and rows[:len(old_rows)] == old_rows
    # Nothing old moved: every file of the old folder is the start of the new one, the tokenizer the same file.
    now = files_of(data)
    assert now["tokenizer.json"] == before["tokenizer.json"]
    for name in (f"{s}.{ext}" for s in ("train", "val", "test") for ext in ("bin", "idx", "ctx.bin", "ctx.idx")):
        assert now[name].startswith(before[name]), name
    # A reply to an old thread went to that thread's split, under its key.
    split_of = {r["thread"]: r["split"] for r in old_rows}
    late = [r for r in rows if r["id"].startswith("late")]
    assert len(late) == 5 and all(split_of[r["thread"]] == r["split"] for r in late)
    assert meta["contexts"]["splits"] == _contexts_of(meta)
    # The same folder as a full prepare of the whole mbox with the old tokenizer.
    full = tmp_path / "full"
    seqlab.prepare(box, full, split=SPLIT, workers=1, tokenizer_from=data)
    expected = files_of(full)
    for name in now:
        if name not in ("meta.json", "seen.bin", "sources.json"):
            assert now[name] == expected[name], name
    full_meta = json.loads(expected["meta.json"])
    assert meta["splits"] == full_meta["splits"] and meta["contexts"] == full_meta["contexts"]


def _contexts_of(meta: dict) -> dict:
    return meta["contexts"]["splits"]


def test_an_old_thread_reply_that_quotes_nothing_takes_its_old_parent_as_context(grown: tuple) -> None:
    box, data, _ = grown
    seqlab.prepare(box, data, update=True, workers=1)
    rows = _rows(data)
    store_rows = {s: [r for r in rows if r["split"] == s] for s in ("train", "val", "test")}
    from seqlab.data.store import TokenStore
    from seqlab.data.tokenizer import load_tokenizer

    tok = load_tokenizer(data / "tokenizer.json")
    for t in (0, 3, 5, 8, 13):
        row = next(r for r in rows if r["id"] == f"late{t}@x")
        at = store_rows[row["split"]].index(row)
        context = TokenStore(data, row["split"]).contexts
        assert context is not None
        text = tok.decode(context.context(at).tolist())
        assert text.strip() == _text(t), (t, text)


def test_an_update_with_nothing_new_adds_nothing_and_says_so(grown: tuple, capsys: pytest.CaptureFixture[str]
                                                             ) -> None:
    box, data, _ = grown
    assert cli_main(["prepare", str(box), "--update", str(data), "--workers", "1", "--quiet"]) == 0
    after_first = files_of(data)
    capsys.readouterr()
    assert cli_main(["prepare", str(box), "--update", str(data), "--workers", "1", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "0 messages read" in out and "nothing new: added nothing" in out
    now = files_of(data)
    assert {n for n in now if now[n] != after_first[n]} == {"meta.json"}  # the report of this update only
    meta, _, _ = check_data_dir(data)
    assert meta["update"]["added"] == 0 and meta["updates"] == 2


def test_an_mbox_rewritten_in_place_is_read_again_and_its_old_mail_counted_as_held(tmp_path: Path) -> None:
    """Not an append (a message deleted from the middle, as a mail client compacting its folder does): the
    file is read whole, and what the folder holds is dropped as held, not added twice."""
    old = old_mail()
    box = write_mbox(tmp_path / "inbox.mbox", old)
    data = tmp_path / "data"
    seqlab.prepare(box, data, split=SPLIT, workers=1)
    write_mbox(box, old[:3] + old[4:] + [_msg("new@x", "Fresh", _text(900))])
    meta = seqlab.prepare(box, data, update=True, workers=1).meta
    assert meta["update"]["seen"] == len(old) and meta["update"]["held"] == len(old) - 1
    assert meta["update"]["added"] == 1
    check_data_dir(data)


def test_a_tree_of_message_files_reads_only_new_and_changed_files(tmp_path: Path) -> None:
    tree = tmp_path / "mail"
    tree.mkdir()
    for i, raw in enumerate(old_mail()):
        (tree / f"{i:03d}.eml").write_bytes(raw)
    data = tmp_path / "data"
    seqlab.prepare(tree, data, split=SPLIT, workers=1)
    (tree / "900.eml").write_bytes(_msg("new@x", "Fresh", _text(900)))
    meta = seqlab.prepare(tree, data, update=True, workers=1).meta
    assert meta["update"]["seen"] == 1 and meta["update"]["added"] == 1
    check_data_dir(data)


def test_update_of_a_folder_that_is_not_a_data_dir_is_one_sentence(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    box = write_mbox(tmp_path / "inbox.mbox", old_mail())
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "todo.txt").write_text("mine")
    for folder in ("notes", "absent"):
        assert cli_main(["prepare", str(box), "--update", str(tmp_path / folder)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert err == [f"seqlab: error: --update {tmp_path / folder} is not a data folder made by `seqlab prepare` "
                       "(it holds no meta.json); prepare it without --update first."], err
    assert [p.name for p in (tmp_path / "notes").iterdir()] == ["todo.txt"]
    assert cli_main(["prepare", str(box), "--update", str(tmp_path / "notes"), "--out", str(tmp_path / "x")]) == 2
    assert "not both" in capsys.readouterr().err
    seqlab.prepare(box, tmp_path / "data", workers=1)
    assert cli_main(["prepare", str(box), "--update", str(tmp_path / "data"), "--seed", "3"]) == 2
    assert capsys.readouterr().err.strip() == ("seqlab: error: --update keeps the data folder's own settings and "
                                               "tokenizer; leave out --seed.")


# SEQLAB_TEST_KILL_AT points inside an update: (the point, what the moment is)
MOMENTS = [
    ("*/train.bin:during", "the grown train file written, not yet renamed"),
    ("*/seen.bin:during", "the grown seen.bin half written"),
    ("*/meta.json:after", "every file complete, the folder not yet in place"),
    ("data:old-moved", "between the two renames that swap the grown folder in"),
]


@pytest.mark.parametrize("point", [m[0] for m in MOMENTS], ids=[m[1] for m in MOMENTS])
def test_a_crash_during_an_update_leaves_the_old_folder_whole_and_a_rerun_finishes(
        point: str, grown: tuple, tmp_path: Path) -> None:
    box, data, before = grown
    reference = tmp_path / "reference"
    shutil.copytree(data, reference)
    seqlab.prepare(box, reference, update=True, workers=1)
    cmd = [sys.executable, "-m", "seqlab", "prepare", str(box), "--update", str(data), "--workers", "1", "--quiet"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    r = subprocess.run(cmd, capture_output=True, text=True, env={**env, "SEQLAB_TEST_KILL_AT": point})
    assert r.returncode == -signal.SIGKILL, r.stderr
    if point == "data:old-moved":  # the old folder waits aside, whole; the rerun puts it back first
        aside = [p for p in data.parent.iterdir() if p.name.startswith(".data.old-")]
        assert not data.exists() and [files_of(p) for p in aside] == [before]
    else:
        assert files_of(data) == before
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    assert "added 10 emails" in r.stdout
    assert files_of(data) == files_of(reference)
    assert not [p for p in data.parent.iterdir() if p.name.startswith(".data.old-")]


def test_a_run_on_the_old_folder_resumes_and_inits_on_the_grown_one(grown: tuple, tmp_path: Path) -> None:
    """The tokenizer file is the same, so a run trained before the update goes on (`--resume`) or starts a new
    run from its weights (`--init`) on the grown folder; a run on another tokenizer would be refused."""
    box, data, _ = grown
    tiny = {"max_steps": 4, "threads": 1, "eval_every": 2}
    run = seqlab.train(data, tmp_path / "run", preset="tiny", train=tiny)
    seqlab.prepare(box, data, update=True, workers=1)
    more = seqlab.train(data, run.path, resume=True, train={"max_steps": 6})
    assert more.summary["steps"] == 6 and more.summary["resumed_at"] == 4
    fresh = seqlab.train(data, tmp_path / "init", init=run.path, train={**tiny, "max_steps": 2})
    assert fresh.summary["steps"] == 2


def test_a_maildir_reads_only_new_keys_and_a_flag_change_reads_nothing(tmp_path: Path) -> None:
    """A Maildir never rewrites a message: a new key is new mail, a message moved from new/ to cur/ with a
    flag (read, replied) is the same key and is not read again."""
    import mailbox

    md = mailbox.Maildir(tmp_path / "Maildir", create=True)
    keys = [md.add(raw) for raw in old_mail()]
    data = tmp_path / "data"
    seqlab.prepare(tmp_path / "Maildir", data, split=SPLIT, workers=1)
    message = md[keys[0]]
    message.set_subdir("cur")
    message.add_flag("S")
    md[keys[0]] = message  # renamed to cur/KEY:2,S
    md.add(_msg("new@x", "Fresh", _text(900)))
    meta = seqlab.prepare(tmp_path / "Maildir", data, update=True, workers=1).meta
    assert meta["update"]["seen"] == 1 and meta["update"]["added"] == 1
    check_data_dir(data)


def test_ctrl_c_during_an_update_leaves_the_old_folder_and_nothing_beside_it(grown: tuple) -> None:
    box, data, before = grown
    cmd = [sys.executable, "-m", "seqlab", "prepare", str(box), "--update", str(data), "--workers", "1", "--quiet"]
    r = subprocess.run(cmd, capture_output=True, text=True,
                       env={**os.environ, "OMP_NUM_THREADS": "1", "SEQLAB_TEST_KILL_AT": "*/train.bin:during@INT"})
    assert r.returncode == 130 and r.stderr.strip().splitlines()[-1] == "seqlab: interrupted", r.stderr
    assert files_of(data) == before
    assert sorted(p.name for p in data.parent.iterdir()) == ["data", "inbox.mbox"]


def test_a_date_split_folder_grows_with_its_latest_new_threads_held_out(tmp_path: Path) -> None:
    """One person's mail (`senders`, hence split by date): the latest new threads go to test, then val, until
    each holds its share of all the mail; the old threads stay where they were."""
    box = write_mbox(tmp_path / "inbox.mbox", old := old_mail())
    data = tmp_path / "data"
    seqlab.prepare(box, data, senders=["kim@example.org"], workers=1)
    old_rows = _rows(data)
    fresh = [_msg(f"day{d}@x", f"Day {d}", _text(500 + d)).replace(b"Tue, 9 Jan 2024 09:00:00",
                                                                  f"{d % 28 + 1:02d} Feb {2024 + d // 28}".encode()
                                                                  + b" 09:00:00")
             for d in range(300)]
    _append(box, new_mail(old) + fresh)
    meta = seqlab.prepare(box, data, update=True, workers=1).meta
    _, rows, _ = check_data_dir(data)
    assert meta["split_by"] == "date" and meta["update"]["added"] == 310 and rows[:len(old_rows)] == old_rows
    for split in ("val", "test"):
        assert meta["splits"][split]["emails"] == round(0.05 * meta["kept"])
    day = {r["id"]: int(r["id"][3:-2]) for r in rows if r["id"].startswith("day")}
    by_split = {s: [day[r["id"]] for r in rows if r["id"] in day and r["split"] == s] for s in ("train", "val", "test")}
    assert max(by_split["train"]) < min(by_split["val"]) and max(by_split["val"]) < min(by_split["test"])
    split_of = {r["thread"]: r["split"] for r in old_rows}
    assert all(split_of[r["thread"]] == r["split"] for r in rows if r["id"].startswith("late"))


def test_thunderbird_folders_other_than_the_folders_prepared_from_are_refused(grown: tuple) -> None:
    """--folders chooses what a Thunderbird folder reads; an update keeps the folder's own choice (none here)."""
    box, data, before = grown
    from seqlab.data.prepare.grow import update

    with pytest.raises(seqlab.UserError, match="differs from the folders"):
        update(str(box), data, folders=("Inbox",), workers=1, progress=False)
    assert files_of(data) == before
