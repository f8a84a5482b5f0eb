"""Thunderbird accounts whose folders prefs.js places outside the profile (seqlab/data/mail/thunderbird_prefs.py).

A profile made here as Thunderbird leaves one after a person moved two accounts' Local Directory: prefs.js
names one folder in the relative form Thunderbird writes first (`[ProfD]../../Archive/...`, outside the
profile), one only by absolute path, one back inside Mail/ (read once, not twice), and one that is gone.
Prepared, the profile gives the same DATA_DIR as one mbox of the same messages in reading order; the listing
says where each moved account's folders were found.
"""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st
from mail_samples import corpus_messages
from test_thunderbird import _bytes_of, tb_message, write_folder

from seqlab.api.data import thunderbird
from seqlab.cli.main import main
from seqlab.data.mail.thunderbird_prefs import account_dirs, parse_prefs


def test_prefs_are_parsed_as_data_never_run() -> None:
    text = "\n".join([
        "// Mozilla User Preferences",
        '/* a comment */ user_pref("not.read", 1);',  # not at a line's start: passed over, as any odd line
        'user_pref("mail.server.server2.directory", "C:\\\\Users\\\\ann\\\\Mail \\"x\\"");',
        'user_pref("mail.server.server2.name", "Caf\\u00e9 \\x41\\n");',
        'user_pref("mail.server.server2.port", -993);',
        'user_pref("mail.server.server2.login_at_startup", true);',
        'user_pref("evil", require("child_process").execSync("touch /tmp/owned"));',
        'user_pref("unterminated", "abc);',
    ])
    assert parse_prefs(text) == {"mail.server.server2.directory": 'C:\\Users\\ann\\Mail "x"',
                                 "mail.server.server2.name": "Café A\n",
                                 "mail.server.server2.port": -993,
                                 "mail.server.server2.login_at_startup": True}


@settings(max_examples=200, deadline=None)
@given(st.text(), st.one_of(st.text(), st.integers(-2**31, 2**31), st.booleans()), st.booleans())
def test_a_pref_written_as_json_reads_back(key: str, value: str | int | bool, ascii_only: bool) -> None:
    """JSON's string escapes are JavaScript's; Thunderbird writes its strings the same way."""
    line = f"user_pref({json.dumps(key, ensure_ascii=ascii_only)}, {json.dumps(value, ensure_ascii=ascii_only)});"
    assert parse_prefs(f"// prefs\r\n{line}\r\n") == {key: value}


def moved_profile(tmp_path: Path) -> tuple[Path, list[bytes], dict[str, Path]]:
    """The profile, the message blocks it reads in reading order, and where the moved accounts are."""
    msgs = corpus_messages()
    profile = tmp_path / "profiles" / "ab12.default"
    archive = tmp_path / "Archive" / "imap.example.org"  # [ProfD]../../Archive/imap.example.org
    other = tmp_path / "Other" / "pop.example.net"  # absolute path only
    blocks = {name: [tb_message(m) for m in part] for name, part in
              (("local", msgs[:10]), ("archive_inbox", msgs[10:22]), ("archive_sub", msgs[22:30]),
               ("other", msgs[30:]))}
    write_folder(profile / "Mail" / "Local Folders" / "Inbox", blocks["local"])
    write_folder(archive / "INBOX", blocks["archive_inbox"])
    write_folder(archive / "INBOX.sbd" / "Lists", blocks["archive_sub"])
    write_folder(archive / "Trash", [tb_message(m) for m in msgs[:2]])  # left out by name, as in the profile
    write_folder(other / "Inbox", blocks["other"])
    (profile / "prefs.js").write_text("\n".join([
        "// Mozilla User Preferences", "",
        'user_pref("mail.server.server1.directory-rel", "[ProfD]Mail/Local Folders");',
        f'user_pref("mail.server.server1.directory", "{profile / "Mail" / "Local Folders"}");',
        'user_pref("mail.server.server2.directory-rel", "[ProfD]../../Archive/imap.example.org");',
        'user_pref("mail.server.server2.directory", "/nowhere/the/old/place");',  # the relative form wins
        f'user_pref("mail.server.server3.directory", "{other}");',
        'user_pref("mail.server.server4.directory-rel", "[ProfD]../../Gone/pop.example.com");',
        'user_pref("mail.server.server2.hostname", "imap.example.org");', ""]))
    order = blocks["local"] + blocks["archive_inbox"] + blocks["archive_sub"] + blocks["other"]
    return profile, order, {"archive": archive, "other": other, "gone": tmp_path / "Gone" / "pop.example.com"}


def test_account_dirs_resolve_both_forms(tmp_path: Path) -> None:
    profile, _, where = moved_profile(tmp_path)
    found = {a.server: a for a in account_dirs(profile)}
    assert found["server1"].path == profile / "Mail" / "Local Folders"
    assert found["server2"].path == where["archive"] and found["server3"].path == where["other"]
    assert found["server4"].path == where["gone"] and not found["server4"].exists


def test_moved_accounts_are_read_and_listed(tmp_path: Path, capsys) -> None:
    profile, order, where = moved_profile(tmp_path)
    tb = thunderbird(f"thunderbird:{profile}")
    archive, other = where["archive"].as_posix(), where["other"].as_posix()
    assert [f.name for f in tb.folders] == ["Mail/Local Folders/Inbox", f"{archive}/INBOX",
                                            f"{archive}/INBOX/Lists", f"{other}/Inbox"]
    assert [f.name for f in tb.left_out] == [f"{archive}/Trash"]
    assert main(["prepare", f"thunderbird:{profile}", "--out", str(tmp_path / "tb"), "--workers", "1"]) == 0
    listing = capsys.readouterr().out.split("source:")[0]
    assert f"prefs.js places server2's folders in {where['archive']}\n" in listing
    assert f"prefs.js places server4's folders in {where['gone']}, which is not there: not read" in listing
    assert "server1" not in listing  # inside Mail/: read there, once
    assert f"reading 4 folders, {len(order)} messages" in listing
    one = tmp_path / "all.mbox"
    one.write_bytes(b"".join(order))
    assert main(["prepare", str(one), "--out", str(tmp_path / "mbox"), "--workers", "1", "--quiet"]) == 0
    assert _bytes_of(tmp_path / "tb") == _bytes_of(tmp_path / "mbox")


def test_folders_names_a_moved_folder_by_its_last_parts(tmp_path: Path) -> None:
    profile, _, where = moved_profile(tmp_path)
    tb = thunderbird(f"thunderbird:{profile}", ["imap.example.org/INBOX/Lists", "Trash"])
    assert [f.path for f in tb.folders] == [where["archive"] / "INBOX.sbd" / "Lists", where["archive"] / "Trash"]
