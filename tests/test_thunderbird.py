"""`seqlab prepare thunderbird[:PROFILE]` against a Thunderbird profile made here as Thunderbird lays one out:
profiles.ini and installs.ini in the profiles folder of each platform (chosen by a parameter, HOME and APPDATA
pointed at a temporary folder), Local Folders and an IMAP server's offline copies as mbox files with
X-Mozilla-Status headers, `.msf` summaries, an `.sbd` subfolder, a Trash, a Junk, and a message marked deleted.
"""

from __future__ import annotations

import configparser
import json
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mail_samples import corpus_messages, mail

import seqlab
from seqlab.api.data import thunderbird
from seqlab.cli.main import main
from seqlab.data.mail.thunderbird import is_expunged
from seqlab.data.mail.thunderbird_profiles import Profile, find_profile, profile_roots, read_profiles
from seqlab.errors import UserError

TB_ENVELOPE = b"From - Mon Jan  8 09:00:00 2024"
INSTALL = "4F96D1932A9F858E"
DELETED = mail("Gone", "This message was deleted in Thunderbird and must never be read.", "deleted@x")
TRASHED = mail("Binned", "This message sits in the Trash and must never be read.", "trashed@x")
JUNK = mail("Win now", "This message sits in Junk and must never be read.", "junk@x")


def tb_message(raw: bytes, status: str = "0001", crlf: bool = False) -> bytes:
    """One message as Thunderbird appends it to a folder: envelope, its X-Mozilla headers, body lines that start
    with "From " quoted, a blank line after it."""
    head = f"X-Mozilla-Status: {status}\nX-Mozilla-Status2: 00000000\nX-Mozilla-Keys: {' ' * 80}\n".encode()
    text = TB_ENVELOPE + b"\n" + head + raw.replace(b"\nFrom ", b"\n>From ").rstrip(b"\n") + b"\n\n"
    return text.replace(b"\n", b"\r\n") if crlf else text


def write_folder(path: Path, blocks: list[bytes]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(blocks))
    path.with_name(path.name + ".msf").write_bytes(b"// <!-- <mdb:mork:z v=\"1.4\"/> -->\n")  # never read


def make_profile(folder: Path, msgs: list[bytes]) -> list[bytes]:
    """A profile holding `msgs` (plus a deleted, a trashed and a junk message); returns the blocks it reads, in
    the order it reads them."""
    local, imap = folder / "Mail" / "Local Folders", folder / "ImapMail" / "imap.example.org"
    inbox = [tb_message(m) for m in msgs[:12]]
    archive = [tb_message(m) for m in msgs[12:20]]
    imap_inbox = [tb_message(m, crlf=True) for m in msgs[20:36]]
    sent = [tb_message(m, status="0003", crlf=True) for m in msgs[36:]]  # read + replied: still read
    write_folder(local / "Inbox", inbox[:5] + [tb_message(DELETED, status="0009")] + inbox[5:])
    write_folder(local / "Trash", [tb_message(TRASHED)])
    write_folder(local / "Archives", [])  # a folder that only holds subfolders: an empty mbox
    write_folder(local / "Archives.sbd" / "2023", archive)
    (local / "msgFilterRules.dat").write_text('version="9"\nlogging="no"\n')
    write_folder(imap / "INBOX", imap_inbox)
    write_folder(imap / "Sent", sent)
    write_folder(imap / "Junk", [tb_message(JUNK, crlf=True)])
    (folder / "ImapMail" / "imap.example.org.msf").write_bytes(b"")
    (folder / "prefs.js").write_text('user_pref("mail.root.imap", "ImapMail");\n')
    return archive + inbox + imap_inbox + sent  # the order Thunderbird's folders are read in: by name


PROFILES_INI = """[Install{install}]
Default={default}
Locked=1

[Profile2]
Name=work
IsRelative=0
Path={work}

[Profile1]
Name=default
IsRelative=1
Path=Profiles/old.default
Default=1

[Profile0]
Name=default-release
IsRelative=1
Path=Profiles/abcd1234.default-release

[General]
StartWithLastProfile=1
Version=2
"""


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """HOME with a Thunderbird on Linux: three profiles, the installation's default "default-release" (in
    installs.ini, and in profiles.ini as Thunderbird 68 and later write both), an older Default=1 on "default",
    and "work" kept outside the profiles folder (IsRelative=0)."""
    home = tmp_path / "home"
    root = home / ".thunderbird"
    make_profile(root / "Profiles" / "abcd1234.default-release", corpus_messages())
    make_profile(root / "Profiles" / "old.default", [mail("Old", "An old profile's only message, long enough.")])
    make_profile(tmp_path / "elsewhere" / "work", [mail("Work", "The work profile's only message, long enough.")])
    (root / "profiles.ini").write_text(PROFILES_INI.format(install=INSTALL, default="Profiles/abcd1234.default-release",
                                                           work=tmp_path / "elsewhere" / "work"))
    (root / "installs.ini").write_text(f"[{INSTALL}]\nDefault=Profiles/abcd1234.default-release\nLocked=1\n")
    monkeypatch.setenv("HOME", str(home))
    return home


def _bytes_of(data_dir: Path) -> dict[str, bytes]:
    """Every file of a DATA_DIR, with what names the input left out: the source paths in emails.jsonl, meta.json
    and sources.json, and the messages seen and skipped (the profile also holds a deleted message)."""
    out = {}
    for path in sorted(data_dir.iterdir()):
        if path.name == "emails.jsonl":
            rows = [json.loads(line) for line in path.read_text().splitlines()]
            out[path.name] = json.dumps([{k: v for k, v in r.items() if k != "source"} for r in rows]).encode()
        elif path.name == "meta.json":
            meta = json.loads(path.read_text())
            for key in ("source", "prepare", "skipped", "seen"):
                meta.pop(key, None)
            out[path.name] = json.dumps(meta, sort_keys=True).encode()
        elif path.name != "sources.json":  # what was read where, for a later --update: paths again
            out[path.name] = path.read_bytes()
    return out


def test_prepare_thunderbird_equals_the_same_mail_from_one_mbox(home: Path, tmp_path: Path, capsys) -> None:
    blocks = make_profile(tmp_path / "copy", corpus_messages())  # the same blocks, in reading order
    one = tmp_path / "all.mbox"
    one.write_bytes(b"".join(blocks))
    assert main(["prepare", "thunderbird", "--out", str(tmp_path / "tb"), "--workers", "1", "--quiet"]) == 0
    printed = capsys.readouterr().out
    assert main(["prepare", str(one), "--out", str(tmp_path / "mbox"), "--workers", "1", "--quiet"]) == 0
    tb, ref = _bytes_of(tmp_path / "tb"), _bytes_of(tmp_path / "mbox")
    assert tb == ref and len(tb) > 8
    ids = {json.loads(line)["id"] for line in (tmp_path / "tb" / "emails.jsonl").read_text().splitlines()}
    assert ids.isdisjoint({"deleted@x", "trashed@x", "junk@x"})
    meta = json.loads((tmp_path / "tb" / "meta.json").read_text())
    assert meta["source"] == "thunderbird" and meta["skipped"]["deleted"] == 1
    # The listing comes first: the profile, each folder read with its count, what was left out.
    listing = printed.split("source:")[0]
    profile = home / ".thunderbird" / "Profiles" / "abcd1234.default-release"
    assert f"Thunderbird profile default-release ({profile})" in listing
    for name, count in (("Mail/Local Folders/Inbox", "13 messages (1 deleted, not read)"),
                        ("Mail/Local Folders/Archives/2023", "8 messages"),
                        ("Mail/Local Folders/Archives", " 0 messages"),
                        ("ImapMail/imap.example.org/INBOX", "16 messages"),
                        ("ImapMail/imap.example.org/Sent", "8 messages")):
        assert any(line.strip().startswith(name) and line.rstrip().endswith(count) for line in listing.splitlines())
    assert "left out: Mail/Local Folders/Trash, ImapMail/imap.example.org/Junk" in listing
    assert "reading 5 folders, 44 messages" in listing
    assert ".msf" not in listing and "msgFilterRules" not in listing


def test_the_listing_for_python_callers(home: Path) -> None:
    tb = thunderbird()
    assert tb.profile == Profile("default-release", home / ".thunderbird" / "Profiles" / "abcd1234.default-release")
    assert [f.name for f in tb.folders] == [
        "Mail/Local Folders/Archives", "Mail/Local Folders/Archives/2023", "Mail/Local Folders/Inbox",
        "ImapMail/imap.example.org/INBOX", "ImapMail/imap.example.org/Sent"]
    assert [f.name for f in tb.left_out] == ["Mail/Local Folders/Trash", "ImapMail/imap.example.org/Junk"]
    assert [(c.messages, c.deleted) for c in tb.counts()] == [(0, 0), (8, 0), (13, 1), (16, 0), (8, 0)]
    assert tb.folders[2].path == tb.profile.path / "Mail" / "Local Folders" / "Inbox"


def test_folders_chooses_by_name_and_reads_trash_when_named(home: Path, tmp_path: Path) -> None:
    tb = thunderbird("thunderbird", ["sent", "Local Folders/Inbox", "Trash"])
    assert [f.name for f in tb.folders] == ["Mail/Local Folders/Inbox", "Mail/Local Folders/Trash",
                                            "ImapMail/imap.example.org/Sent"]
    data = seqlab.prepare("thunderbird", tmp_path / "d", folders=["Inbox", "Sent", "Trash"], workers=1,
                          split=(0.5, 0.25, 0.25))
    assert data.meta["seen"] == 13 + 16 + 8 + 1  # both INBOXes match "Inbox", and the Trash was named
    ids = {json.loads(line)["id"] for line in (tmp_path / "d" / "emails.jsonl").read_text().splitlines()}
    assert "trashed@x" in ids and "deleted@x" not in ids and "junk@x" not in ids


def test_profiles_by_name_and_by_folder(home: Path, tmp_path: Path) -> None:
    root = home / ".thunderbird"
    assert find_profile("default").path == root / "Profiles" / "old.default"
    assert find_profile("DEFAULT-release").name == "default-release"  # case-insensitive when not exact
    assert find_profile("work").path == tmp_path / "elsewhere" / "work"  # IsRelative=0: the absolute path
    assert find_profile(str(root / "Profiles" / "old.default")).name == "default"  # by folder
    assert find_profile(str(tmp_path / "elsewhere" / "work")).name == "work"
    copy = tmp_path / "backup" / "xyz.default"  # a profile profiles.ini does not list: read by its folder
    make_profile(copy, [mail("Copy", "A copied profile's message.")])
    assert find_profile(str(copy)) == Profile("xyz.default", copy)
    tb = thunderbird(f"thunderbird:{copy}")
    assert tb.profile.path == copy and sum(c.messages - c.deleted for c in tb.counts()) == 1


def test_the_installs_default_wins_over_default_1(home: Path) -> None:
    root = home / ".thunderbird"
    text = (root / "profiles.ini").read_text()
    (root / "profiles.ini").write_text(text[text.index("[Profile2]"):])  # no [Install]: installs.ini names it
    assert find_profile(None).name == "default-release"
    (root / "installs.ini").unlink()  # an older Thunderbird: Default=1 decides
    assert find_profile(None).name == "default"


@pytest.mark.parametrize("platform, where", [
    ("linux", ".thunderbird"), ("linux", "snap/thunderbird/common/.thunderbird"),
    ("linux", ".var/app/org.mozilla.Thunderbird/.thunderbird"), ("darwin", "Library/Thunderbird"),
    ("win32", "AppData/Roaming/Thunderbird")])
def test_each_platforms_profiles_folder(tmp_path: Path, platform: str, where: str) -> None:
    root = tmp_path / where
    make_profile(root / "Profiles" / "p1.default", [mail("Hi", "A message in the only profile.")])
    (root / "profiles.ini").write_text("[Profile0]\nName=default\nIsRelative=1\nPath=Profiles/p1.default\n")
    env = {"APPDATA": str(tmp_path / "AppData" / "Roaming")}
    assert root in profile_roots(platform, tmp_path, env)
    profile = find_profile(None, platform=platform, home=tmp_path, environ=env)
    assert profile == Profile("default", root / "Profiles" / "p1.default")  # the only one: the default


def test_windows_relative_path_with_backslashes(tmp_path: Path) -> None:
    root = tmp_path / "Roaming" / "Thunderbird"
    (root / "Profiles" / "p1.default" / "Mail").mkdir(parents=True)
    (root / "profiles.ini").write_text("[Profile0]\r\nName=me\r\nIsRelative=1\r\nPath=Profiles\\p1.default\r\n"
                                       "Default=1\r\n")
    profiles, default = read_profiles(root)
    assert default == profiles[0] == Profile("me", root / "Profiles" / "p1.default")


def test_errors_name_what_was_looked_for(home: Path, tmp_path: Path, monkeypatch, capsys) -> None:
    out = str(tmp_path / "out")
    assert main(["prepare", "thunderbird:nobody", "--out", out]) == 2
    err = capsys.readouterr().err
    assert err.startswith("seqlab: error: No Thunderbird profile is named 'nobody'; the profiles are work (")
    assert "default-release (" in err and err.count("\n") == 1
    assert main(["prepare", "thunderbird", "--folders", "Outbox", "--out", out]) == 2
    assert "--folders 'Outbox' names no folder" in capsys.readouterr().err
    assert main(["prepare", str(tmp_path), "--folders", "Inbox", "--out", out]) == 2
    assert "is not a Thunderbird source" in capsys.readouterr().err
    monkeypatch.setenv("HOME", str(tmp_path / "empty"))
    assert main(["prepare", "thunderbird", "--out", out]) == 2
    err = capsys.readouterr().err
    empty = tmp_path / "empty"
    assert err == (f"seqlab: error: No Thunderbird profile was found: there is no profiles.ini in "
                   f"{empty / '.thunderbird'}, {empty / 'snap/thunderbird/common/.thunderbird'} or "
                   f"{empty / '.var/app/org.mozilla.Thunderbird/.thunderbird'}; name a profile folder with "
                   "thunderbird:PATH.\n")
    assert not Path(out).exists()


def test_a_profile_folder_that_is_gone_and_an_empty_profiles_ini(home: Path) -> None:
    root = home / ".thunderbird"
    (root / "profiles.ini").write_text("[Profile0]\nName=gone\nIsRelative=1\nPath=Profiles/gone\n")
    with pytest.raises(UserError, match=r"^The Thunderbird profile 'gone' is listed at .*Profiles/gone, which is "
                                        r"not a folder\.$"):
        find_profile(None)
    (root / "profiles.ini").write_text("[General]\nStartWithLastProfile=1\n")
    with pytest.raises(UserError, match=r"^No Thunderbird profile was found: the profiles.ini in .*\.thunderbird "
                                        r"lists none; name a profile folder with thunderbird:PATH\.$"):
        find_profile(None)


def test_a_maildir_store_profile_reads_as_the_mbox_one(tmp_path: Path) -> None:
    """A profile switched to the maildir store: each folder a directory whose cur/ holds one file per message
    (with Thunderbird's X-Mozilla-Status header), subfolders in .sbd as in the mbox store."""
    msgs = corpus_messages()
    profile = tmp_path / "p.default"
    local = profile / "Mail" / "Local Folders"
    inbox, sub = local / "Inbox", local / "Inbox.sbd" / "Lists"
    for folder in (inbox, sub):
        (folder / "cur").mkdir(parents=True)
        (folder / "tmp").mkdir()
    for i, raw in enumerate(msgs):
        head = b"X-Mozilla-Status: 0001\nX-Mozilla-Status2: 00000000\n"
        ((inbox if i < 30 else sub) / "cur" / f"{1700000000 + i}.eml").write_bytes(head + raw)
    (inbox / "cur" / "1800000000.eml").write_bytes(b"X-Mozilla-Status: 0009\n" + DELETED)
    tb = thunderbird(f"thunderbird:{profile}")
    assert [(f.name, f.store) for f in tb.folders] == [("Mail/Local Folders/Inbox", "maildir"),
                                                       ("Mail/Local Folders/Inbox/Lists", "maildir")]
    assert [(c.messages, c.deleted) for c in tb.counts()] == [(31, 1), (14, 0)]
    assert "(maildir)" in tb.listing()
    one = tmp_path / "one.mbox"
    one.write_bytes(b"".join(tb_message(m) for m in msgs))
    seqlab.prepare(f"thunderbird:{profile}", tmp_path / "tb", workers=1)
    seqlab.prepare(one, tmp_path / "mbox", workers=1)
    assert _bytes_of(tmp_path / "tb") == _bytes_of(tmp_path / "mbox")
    read = tb.items()
    assert len(list(read)) == 45
    (sub / "cur" / "1900000000.eml").write_bytes(b"X-Mozilla-Status: 0001\n" + _new(1)[0])  # new mail: only it
    assert list(thunderbird(f"thunderbird:{profile}").items().items(read.state())) == [
        (str(sub / "cur" / "1900000000.eml"), b"X-Mozilla-Status: 0001\n" + _new(1)[0])]


def test_a_fifo_and_a_symlink_loop_in_the_profile_are_passed_over(home: Path) -> None:
    """A FIFO where a folder file would be is never opened (opening it would wait for a writer for ever), and an
    .sbd that links back to its parent is not walked (it would never end)."""
    local = home / ".thunderbird" / "Profiles" / "abcd1234.default-release" / "Mail" / "Local Folders"
    os.mkfifo(local / "Stuck")
    (local / "Inbox.sbd").symlink_to(local, target_is_directory=True)
    (local / "Loop").symlink_to(local / "Inbox")  # a link to a folder file is read as that folder
    tb = thunderbird()
    assert [f.name for f in tb.folders][:4] == ["Mail/Local Folders/Archives", "Mail/Local Folders/Archives/2023",
                                                "Mail/Local Folders/Inbox", "Mail/Local Folders/Loop"]
    assert "Stuck" not in tb.listing()


def _set_status(path: Path, index: int, status: bytes) -> None:
    """Rewrite the X-Mozilla-Status of the folder's `index`-th message in place, as Thunderbird marks one read,
    flagged or deleted: same length, no byte moves."""
    data = bytearray(path.read_bytes())
    at = -1
    for _ in range(index + 1):
        at = data.index(b"X-Mozilla-Status: ", at + 1)
    data[at + 18:at + 22] = status
    path.write_bytes(bytes(data))


def _new(n: int) -> list[bytes]:
    return [mail(f"New {i}", f"A message that came after the first prepare, number {i}, with words enough.",
                 f"new-{i}@x") for i in range(n)]


def test_update_reads_only_what_thunderbird_appended(home: Path) -> None:
    profile = home / ".thunderbird" / "Profiles" / "abcd1234.default-release"
    inbox, sent = profile / "Mail" / "Local Folders" / "Inbox", profile / "ImapMail" / "imap.example.org" / "Sent"
    first = thunderbird().items()
    labels = [label for label, _ in first]
    assert len(labels) == 13 + 8 + 16 + 8
    state = json.loads(json.dumps(first.state()))  # as sources.json keeps it
    again = thunderbird().items()
    assert list(again.items(state)) == [] and again.state() == state  # nothing changed: nothing read
    # Read and flagged (the first and the last message of Inbox), a tag on one in Sent: in place, nothing new.
    _set_status(inbox, 0, b"0003")
    _set_status(inbox, 12, b"0005")
    _set_status(sent, 7, b"0001")
    assert list(thunderbird().items().items(state)) == []
    # New mail appended to two folders, and a new folder.
    new = _new(4)
    with open(inbox, "ab") as f:
        f.write(tb_message(new[0]) + tb_message(new[1]))
    with open(sent, "ab") as f:
        f.write(tb_message(new[2], crlf=True))
    write_folder(profile / "Mail" / "Local Folders" / "Drafts", [tb_message(new[3])])
    grown = thunderbird().items()
    got = list(grown.items(state))
    assert [label for label, _ in got] == [f"{profile / 'Mail/Local Folders/Drafts'}:0", f"{inbox}:13",
                                           f"{inbox}:14", f"{sent}:8"]
    written = [tb_message(new[3]), tb_message(new[0]), tb_message(new[1]), tb_message(new[2], crlf=True)]
    assert [raw for _, raw in got] == [block.split(b"\n", 1)[1] for block in written]  # less the envelope line
    # Compacted (the deleted message gone) and then grown: the folder is read whole again.
    state = grown.state()
    blocks = inbox.read_bytes().split(TB_ENVELOPE)[1:]
    inbox.write_bytes(b"".join(TB_ENVELOPE + b for b in blocks if b"deleted@x" not in b) + tb_message(_new(5)[4]))
    labels = [label for label, _ in thunderbird().items().items(state)]
    assert labels == [f"{inbox}:{i}" for i in range(15)]
    # Another profile's state is no guide to this one.
    assert len(list(thunderbird().items().items(dict(state, profile="/elsewhere")))) == 1 + 8 + 15 + 16 + 9


def test_prepare_update_adds_the_new_thunderbird_mail(home: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "d"
    assert main(["prepare", "thunderbird", "--out", str(out), "--workers", "1", "--quiet"]) == 0
    inbox = home / ".thunderbird" / "Profiles" / "abcd1234.default-release" / "Mail" / "Local Folders" / "Inbox"
    _set_status(inbox, 0, b"0003")
    with open(inbox, "ab") as f:
        f.write(b"".join(tb_message(m) for m in _new(3)))
    assert main(["prepare", "thunderbird", "--update", str(out), "--workers", "1", "--quiet"]) == 0
    update = json.loads((out / "meta.json").read_text())["update"]
    assert update["seen"] == 3 and update["added"] == 3
    ids = [json.loads(line)["id"] for line in (out / "emails.jsonl").read_text().splitlines()]
    assert ids[-3:] == ["new-0@x", "new-1@x", "new-2@x"] and len(ids) == len(set(ids))


def test_a_broken_profiles_ini_is_one_sentence(home: Path) -> None:
    (home / ".thunderbird" / "profiles.ini").write_text("Name=no section\n")
    with pytest.raises(UserError, match=r"profiles.ini is not a profiles file Thunderbird writes"):
        find_profile(None)


def test_several_profiles_without_a_default(home: Path) -> None:
    root = home / ".thunderbird"
    (root / "installs.ini").unlink()
    text = (root / "profiles.ini").read_text()
    (root / "profiles.ini").write_text(text[text.index("[Profile2]"):].replace("Default=1\n", ""))
    with pytest.raises(UserError, match=r"3 profiles and none is marked the default; choose one with "
                                        r"thunderbird:NAME \(work \("):
        find_profile(None)


@pytest.mark.parametrize("header, deleted", [
    (b"X-Mozilla-Status: 0009\n", True), (b"X-Mozilla-Status: 0001\n", False), (b"X-Mozilla-Status: 0008\r\n", True),
    (b"x-mozilla-status:000A\n", True), (b"", False), (b"X-Mozilla-Status: zz08\n", False),
    # Thunderbird writes its own first; one the sender put further down cannot get a message left out
    (b"X-Mozilla-Status: 0001\nFrom: a@b\nX-Mozilla-Status: 0008\n", False)])
def test_expunged_flag(header: bytes, deleted: bool) -> None:
    assert is_expunged(header + b"Subject: a\n\nX-Mozilla-Status: 0008\n") is deleted  # the body's line never counts


_NAME = st.text(st.characters(blacklist_categories=("Cs", "Cc", "Zl", "Zp")), min_size=1, max_size=20).map(
    str.strip).filter(lambda s: s and not s.startswith(("[", ";", "#")))
_FOLDER = st.text("abcdefghijklmnopqrstuvwxyz0123456789._-", min_size=1, max_size=12).filter(
    lambda s: s not in (".", ".."))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(_NAME, _FOLDER, st.booleans()), min_size=1, max_size=5), st.data())
def test_profiles_ini_round_trip(tmp_path: Path, entries: list[tuple[str, str, bool]], data) -> None:
    """Whatever profiles Thunderbird lists, the parser gives back their names, folders and the default."""
    root = tmp_path / "root"
    root.mkdir(exist_ok=True)
    default = data.draw(st.integers(-1, len(entries) - 1))
    ini = configparser.ConfigParser(interpolation=None)
    ini.optionxform = str  # type: ignore[assignment,method-assign]
    want = []
    for i, (name, folder, relative) in enumerate(entries):
        path = f"Profiles/{folder}" if relative else str(tmp_path / "abs" / folder)
        ini[f"Profile{i}"] = {"Name": name, "IsRelative": "1" if relative else "0", "Path": path,
                              **({"Default": "1"} if i == default else {})}
        want.append(Profile(name, root / "Profiles" / folder if relative else tmp_path / "abs" / folder))
    ini["General"] = {"StartWithLastProfile": "1", "Version": "2"}
    with open(root / "profiles.ini", "w", encoding="utf-8") as f:
        ini.write(f)
    profiles, chosen = read_profiles(root)
    assert profiles == want
    assert chosen == (want[default] if default >= 0 else want[0] if len(want) == 1 else None)
