"""Reading mail sources: every source kind (mbox, Maildir, a tree of files, Enron, Kaggle CSV, one file, an
iterable) built in tmp_path, in input order, with hidden and non-mail files counted. What happens to one
message (decoding, cleaning, never raising) is in test_mail_parsing.py.
"""

from __future__ import annotations

import csv
import mailbox
from pathlib import Path

import pytest
from mail_reading import balanced, iter_raw_messages, read_emails
from mail_samples import mail

from seqlab.data.mail import message_files as mailfiles
from seqlab.data.mail.reader import CleanOptions, detect_source_kind, parse_message
from seqlab.data.mail.records import Email, SkipReport
from seqlab.errors import UserError

OPTS = CleanOptions()


def read_all(path: Path, opts: CleanOptions = OPTS) -> tuple[list[Email], SkipReport]:
    report = SkipReport()
    emails = list(read_emails(path, opts, report))
    assert balanced(report)
    return emails, report


# ---------------------------------------------------------------- sources


def test_mbox_splits_only_on_envelope_lines_after_a_blank_line(tmp_path: Path) -> None:
    box = tmp_path / "inbox"
    box.write_bytes(
        b"From alice@example.com Mon Jan  1 10:00:00 2001\n" + mail("first", "From here on we agree.\n"
        "From bob@example.org Mon Jan  1 10:00:00 2001\n>From the escaped line\n>>From twice") +
        b"\nFrom - Sat Jan  3 01:05:34 1996\n" + mail("second", "body two") +
        b"\nFrom 123@xxx Thu Jul 23 08:19:53 +0000 2015\n" + mail("third", "body three"))
    assert detect_source_kind(box) == "mbox"
    emails, report = read_all(box, CleanOptions(keep_quotes=True))  # keep the ">From" line to see it
    assert [e.subject for e in emails] == ["first", "second", "third"]
    assert emails[0].body == ("From here on we agree.\nFrom bob@example.org Mon Jan  1 10:00:00 2001\n"
                              "From the escaped line\n>From twice")  # not split; mboxrd unescaped once
    assert [e.source for e in emails] == [f"{box}:{i}" for i in range(3)]


def test_mbox_message_over_the_cap_is_skipped_without_losing_the_next(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(mailfiles, "MAX_MESSAGE_BYTES", 500)
    box = tmp_path / "big.mbox"
    box.write_bytes(b"From a@b Mon Jan  1 10:00:00 2001\n" + mail("big", "x" * 2000) +
                    b"\nFrom a@b Mon Jan  1 10:00:00 2001\n" + mail("small", "ok"))
    emails, report = read_all(box)
    assert [e.subject for e in emails] == ["small"] and report.skipped["too_large"] == 1


def test_maildir_with_a_subfolder_and_no_mailbox_created_by_mistake(tmp_path: Path) -> None:
    md = mailbox.Maildir(tmp_path / "Mail", create=True)
    md.add(mail("in new", "one", mid="1@x"))
    msg = mailbox.MaildirMessage(mail("in cur", "two", mid="2@x"))
    msg.set_subdir("cur")
    md.add(msg)
    md.add_folder("Sent").add(mail("sent one", "three", mid="3@x"))
    assert detect_source_kind(tmp_path / "Mail") == "maildir"
    emails, _ = read_all(tmp_path / "Mail")
    assert sorted(e.subject for e in emails) == ["in cur", "in new", "sent one"]
    with pytest.raises(UserError):
        list(read_emails(tmp_path / "Mial", OPTS, SkipReport()))
    assert not (tmp_path / "Mial").exists()
    mailbox.Maildir(tmp_path / "Empty", create=True)
    with pytest.raises(UserError):
        list(read_emails(tmp_path / "Empty", OPTS, SkipReport()))


def test_eml_tree_in_sorted_order_counting_hidden_and_non_mail_files(tmp_path: Path) -> None:
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "deep").mkdir(parents=True)
    (tmp_path / "b" / "2.eml").write_bytes(mail("b2", "x"))
    (tmp_path / "a" / "deep" / "1.txt").write_bytes(mail("a-deep", "x"))
    (tmp_path / "a" / "0.eml").write_bytes(mail("a0", "x"))
    (tmp_path / ".DS_Store").write_bytes(b"\0\0junk")
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "HEAD").write_bytes(b"ref: x")
    (tmp_path / "photo.jpg").write_bytes(b"\xff\xd8\xff")
    assert detect_source_kind(tmp_path) == "tree"
    emails, report = read_all(tmp_path)
    assert [e.subject for e in emails] == ["a0", "a-deep", "b2"]
    assert report.skipped == {"hidden_file": 1, "hidden_dir": 1, "not_mail_file": 1}
    ignored: dict[str, int] = {}
    assert len(list(iter_raw_messages(tmp_path, ignored=ignored))) == 3 and sum(ignored.values()) == 3


def test_enron_layout_with_and_without_trailing_dot(tmp_path: Path) -> None:
    root = tmp_path / "maildir"
    for user, folder, name, subject in [("allen-p", "_sent_mail", "1.", "sent"), ("allen-p", "inbox", "1", "inbox"),
                                        ("bass-e", "inbox", "10.", "ten"), ("bass-e", "inbox", "2.", "two")]:
        (root / user / folder).mkdir(parents=True, exist_ok=True)
        (root / user / folder / name).write_bytes(
            b"Message-ID: <%s.JavaMail.evans@thyme>\r\nDate: Mon, 14 May 2001 16:39:00 -0700 (PDT)\r\n"
            b"From: phillip.allen@enron.com\r\nTo: tim.belden@enron.com\r\nSubject: %s\r\nX-From: Phillip K Allen\r\n"
            b"\r\nHere is our forecast\r\n\r\n ---------------------- Forwarded by Phillip K Allen/HOU/ECT on "
            b"05/14/2001 ---------------------------\r\nold text\r\n" % (subject.encode(), subject.encode()))
    emails, _ = read_all(root)
    assert [e.subject for e in emails] == ["sent", "inbox", "ten", "two"]  # sorted by path, as strings
    e = emails[0]
    assert (e.id, e.sender, e.recipients, e.body) == ("sent.JavaMail.evans@thyme", "phillip.allen@enron.com",
                                                      ["tim.belden@enron.com"], "Here is our forecast")
    assert e.date == "2001-05-14T16:39:00-07:00"


def test_kaggle_csv_file_message_layout(tmp_path: Path) -> None:
    path = tmp_path / "emails.csv"
    rows = [("allen-p/_sent_mail/1.", mail("Re: numbers, \"quoted\"", "Line one, with comma\nLine \"two\"")),
            ("allen-p/_sent_mail/2.", mail("caf\u00e9", "na\u00efve body"))]
    with path.open("w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["file", "message"])
        for name, raw in rows:
            w.writerow([name, raw.decode()])
    assert detect_source_kind(path) == "csv"
    emails, _ = read_all(path)
    assert [(e.subject, e.body) for e in emails] == [("Re: numbers, \"quoted\"", "Line one, with comma\nLine \"two\""),
                                                      ("caf\u00e9", "na\u00efve body")]
    assert [e.source for e in emails] == [f"{path}:0", f"{path}:1"]
    no_ext = tmp_path / "export"
    no_ext.write_bytes(path.read_bytes())
    assert detect_source_kind(no_ext) == "csv"
    bad = tmp_path / "bad.csv"
    bad.write_text("file,body\nx,y\n")
    with pytest.raises(UserError, match="message column"):
        list(read_emails(bad, OPTS, SkipReport()))


def test_single_file_and_spamassassin_envelope(tmp_path: Path) -> None:
    single = tmp_path / "one.eml"
    single.write_bytes(mail("single", "just one"))
    assert detect_source_kind(single) == "message"
    emails, _ = read_all(single)
    assert [(e.subject, e.source) for e in emails] == [("single", str(single))]

    sa = tmp_path / "00001.7c53336b37003a9286aba55d2945844c"
    sa.write_bytes(b"From 12a1mailbot1@web.de  Thu Aug 22 13:17:22 2002\n" + mail("spamassassin", "ham text"))
    emails, _ = read_all(sa)
    assert [(e.subject, e.body, e.source) for e in emails] == [("spamassassin", "ham text", str(sa))]
    assert parse_message(sa.read_bytes(), "x", OPTS).subject == "spamassassin"  # the parser strips it too


def test_missing_or_empty_paths_are_user_errors(tmp_path: Path) -> None:
    for bad in (tmp_path / "nope", tmp_path):
        with pytest.raises(UserError):
            list(read_emails(bad, OPTS, SkipReport()))
    (tmp_path / ".hidden").write_bytes(mail("x", "y"))
    with pytest.raises(UserError, match="no mail"):
        list(iter_raw_messages(tmp_path))


def test_iterable_source_and_limit() -> None:
    messages = [(f"gen:{i}", mail(f"s{i}", "b")) for i in range(10)]
    report = SkipReport()
    assert [e.subject for e in read_emails(messages, OPTS, report, limit=4)] == ["s0", "s1", "s2", "s3"]
    assert report.seen == 4 and balanced(report)
