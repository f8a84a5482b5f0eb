"""`prepare --sender / --exclude-sender` on the From lines real mail has: an address given as a From line
would give it (display name, other case) matches as the bare address does, a value with no address is
refused before any mail is read, and a --sender that matches nobody says so with the skip counts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from preparing import prepare

from seqlab.errors import UserError

# the forms one SpamAssassin writer's From lines take (Justin Mason's, address as in the corpus)
FROMS = ["yyyy@spamassassin.taint.org (Justin Mason)", '"Justin Mason" <yyyy@SpamAssassin.taint.org>',
         "Gary Lawrence Murphy <garym@canada.com>"]
KW = {"split": (1.0, 0.0, 0.0), "progress": False, "workers": 1}


@pytest.fixture
def mailbox(tmp_path: Path) -> Path:
    box = tmp_path / "mail"
    box.mkdir()
    for i, sender in enumerate(FROMS):
        (box / f"{i}.eml").write_text(f"From: {sender}\nTo: list@example.org\nSubject: note {i}\n"
                                      f"Message-ID: <{i}@example.org>\n\nbody number {i} of the list\n")
    return box


def _kept(data: Path) -> tuple[int, dict]:
    meta = json.loads((data / "meta.json").read_text())
    return meta["kept"], meta["skipped"]


@pytest.mark.parametrize("given", ["yyyy@spamassassin.taint.org", "Justin Mason <YYYY@spamassassin.taint.org>",
                                   '"Mason, Justin" <yyyy@spamassassin.taint.org>'])
def test_a_sender_given_as_a_from_line_matches_as_the_bare_address(mailbox: Path, tmp_path: Path,
                                                                   given: str) -> None:
    prepare(str(mailbox), tmp_path / "person", senders=[given], **KW)
    assert _kept(tmp_path / "person") == (2, {"other_sender": 1})
    prepare(str(mailbox), tmp_path / "rest", exclude_senders=[given], **KW)
    assert _kept(tmp_path / "rest") == (1, {"excluded_sender": 2})


@pytest.mark.parametrize("flag", ["senders", "exclude_senders"])
def test_a_value_without_an_address_is_refused_before_reading_mail(tmp_path: Path, flag: str) -> None:
    name = "--sender" if flag == "senders" else "--exclude-sender"
    with pytest.raises(UserError, match=f"{name} 'Justin Mason' holds no email address"):
        prepare(str(tmp_path / "no-such-mail"), tmp_path / "out", **{flag: ["Justin Mason"]}, **KW)
    assert not (tmp_path / "out").exists()


def test_a_sender_matching_nobody_names_the_address_and_the_skips(mailbox: Path, tmp_path: Path) -> None:
    with pytest.raises(UserError, match=r"3 messages seen; skipped: other_sender 3\); no kept message is From "
                                        r"nobody@nowhere\.example"):
        prepare(str(mailbox), tmp_path / "none", senders=["Nobody <nobody@nowhere.example>"], **KW)
