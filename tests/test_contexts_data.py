"""Contexts in the data pipeline: the replied-to text recovered from quotes or the thread, stored as
`{split}.ctx.bin/.idx`, counted in meta.json, never leaking across splits, optional for old folders."""

from __future__ import annotations

import json
from email.parser import BytesParser
from email.policy import default
from pathlib import Path

import numpy as np
import pytest
from preparing import prepare

from seqlab.data.context_store import ctx_paths
from seqlab.data.mail.quoted import clean_and_context, keep_end
from seqlab.data.mail.reader import CleanOptions, parse_message
from seqlab.data.store import TokenStore
from seqlab.data.synthetic.generator import synthetic_messages
from seqlab.data.tokenizer import load_tokenizer
from seqlab.errors import UserError


def quoted_context(body: str, opts: CleanOptions) -> str:
    """The context prepare keeps for a raw body: the text it quotes, cleaned."""
    return clean_and_context(body, opts)[1]


def test_quoted_context_is_the_parents_cleaned_body() -> None:
    """Both quoting styles of the generator (`>` lines, an Outlook block) give back the parent's body
    exactly as cleaning gives it for the parent itself: two computations of one text."""
    emails = [parse_message(raw, label, CleanOptions()) for label, raw in synthetic_messages(120, seed=5)]
    by_id = {e.message_id: e for e in emails}
    replies = [e for e in emails if e.in_reply_to in by_id]
    assert len(replies) > 20
    styles = set()
    for e in replies:
        assert e.context == keep_end(by_id[e.in_reply_to].body)
        assert ">" not in e.context.split("\n")[0] and "wrote:" not in e.context
        styles.add("outlook" if e.subject.startswith("RE:") else "gmail")
    assert styles == {"outlook", "gmail"}
    assert all(e.context == "" for e in emails if e.in_reply_to is None)


def test_quoted_context_by_hand() -> None:
    body = ("Sounds good.\n\nOn Mon, 1 Jan 2001, Bob <b@x.org> wrote:\n> Shall we meet at 3?\n>\n"
            "> Bob\n> -- \n> Bob's signature\n")
    assert quoted_context(body, CleanOptions()) == "Shall we meet at 3?\n\nBob"
    outlook = "Yes.\n\n-----Original Message-----\nFrom: Ann\nSent: Monday\nSubject: x\n\nThe plan is ready.\n"
    assert quoted_context(outlook, CleanOptions()) == "The plan is ready."
    assert quoted_context("No quote at all.\n", CleanOptions()) == ""
    long = "\n".join(f"> line {i}" for i in range(2000))
    kept = quoted_context(long, CleanOptions())
    assert kept.endswith("line 1999") and len(kept) <= 2000 and kept.startswith("line ")


def _unquoted_tree(folder: Path, count: int) -> Path:
    """Synthetic mail with every quote removed (the reply only names its parent by In-Reply-To)."""
    folder.mkdir()
    for i, (_, raw) in enumerate(synthetic_messages(count, seed=2)):
        msg = BytesParser(policy=default).parsebytes(raw)
        text = msg.get_content()
        for marker in ("\n\nOn ", "\n\n-----Original Message-----"):
            if marker in text:
                text = text[: text.index(marker)]
        msg.set_content(text)
        (folder / f"{i:04d}.eml").write_bytes(msg.as_bytes())
    return folder


@pytest.fixture(scope="module")
def thread_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("ctx")
    out = tmp / "data"
    prepare(str(_unquoted_tree(tmp / "mail", 150)), out, seed=1, split=(0.6, 0.2, 0.2), progress=False, workers=1)
    return out


def _texts(store: TokenStore, tok) -> tuple[list[str], list[str]]:  # noqa: ANN001
    assert store.contexts is not None
    emails = [tok.decode(store.email(i).tolist()) for i in range(store.num_emails)]
    contexts = [tok.decode(store.contexts.context(i).tolist()) for i in range(store.num_emails)]
    return emails, contexts


def test_thread_contexts_come_from_the_same_split(thread_dir: Path) -> None:
    """Without quotes the context is the parent's body (In-Reply-To), and the parent is always in the same
    split: no train context holds a val/test email, no test context a train email."""
    meta = json.loads((thread_dir / "meta.json").read_text())
    counts = meta["contexts"]["splits"]
    assert sum(c["quoted"] for c in counts.values()) == 0
    assert sum(c["thread"] for c in counts.values()) > 30
    tok = load_tokenizer(thread_dir / "tokenizer.json")
    bodies = {}
    for split in ("train", "val", "test"):
        store = TokenStore(thread_dir, split)
        emails, contexts = _texts(store, tok)
        bodies[split] = {e.split("\n\n", 1)[1] for e in emails if "\n\n" in e}
        assert sum(1 for c in contexts if c) == counts[split]["thread"]
        assert store.contexts is not None and int(store.contexts.lengths.sum()) == counts[split]["tokens"]
        for c in contexts:
            if c:
                assert c in bodies[split] or any(b.endswith(c) for b in bodies[split])
    for split in ("train", "val", "test"):
        _, contexts = _texts(TokenStore(thread_dir, split), tok)
        others = set().union(*(bodies[s] for s in bodies if s != split))
        assert not [c for c in contexts if c and c in others]


def test_contexts_follow_the_email_order(tiny_data_dir: Path) -> None:
    """Entry i of train.ctx.* belongs to email i of train.*: its text is the quote inside that email's raw
    message (re-read through emails.jsonl ids)."""
    lines = [json.loads(x) for x in (tiny_data_dir / "emails.jsonl").read_text().splitlines()]
    raw = {parse_message(r, lb, CleanOptions()).id: r for lb, r in synthetic_messages(160, seed=0)}
    tok = load_tokenizer(tiny_data_dir / "tokenizer.json")
    store = TokenStore(tiny_data_dir, "train")
    ids = [x["id"] for x in lines if x["split"] == "train"]
    _, contexts = _texts(store, tok)
    for ident, ctx in zip(ids, contexts):
        assert ctx == parse_message(raw[ident], "", CleanOptions()).context
    meta = json.loads((tiny_data_dir / "meta.json").read_text())
    assert meta["contexts"]["splits"]["train"]["quoted"] == sum(1 for c in contexts if c) > 10


def test_old_data_dir_without_contexts_loads(tiny_data_dir: Path, tmp_path: Path) -> None:
    old = tmp_path / "old"
    old.mkdir()
    for p in tiny_data_dir.iterdir():
        if ".ctx." not in p.name:
            (old / p.name).write_bytes(p.read_bytes())
    meta = json.loads((old / "meta.json").read_text())
    del meta["contexts"]
    (old / "meta.json").write_text(json.dumps(meta))
    store = TokenStore(old, "train")
    assert store.contexts is None and store.num_emails == TokenStore(tiny_data_dir, "train").num_emails


def test_damaged_context_index_is_a_user_error(tiny_data_dir: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad"
    bad.mkdir()
    for p in tiny_data_dir.iterdir():
        (bad / p.name).write_bytes(p.read_bytes())
    _, idx = ctx_paths(bad, "train")
    idx.write_bytes(idx.read_bytes()[:-8])
    with pytest.raises(UserError, match="ctx.idx"):
        TokenStore(bad, "train")
    idx.unlink()
    with pytest.raises(UserError, match="missing"):
        TokenStore(bad, "train")
    assert np.all(np.diff(TokenStore(tiny_data_dir, "train").contexts.starts) >= 0)
