"""`seqlab serve --learn`: the person's sent emails kept privately, learned from while idle, swapped in whole,
checkpointed, loaded again on the next start, and forgotten on request."""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import torch
from serving_helpers import ready_client, served

from seqlab.runs.load import load_run
from seqlab.serving.app import ServerConfig
from seqlab.serving.engine import prompt_text
from seqlab.serving.learner import Learner, LearnSettings, load_learned, weights_digest
from seqlab.serving.personal import LEARNED, LEARNED_META, PERSONAL, SENT, PersonalStore

MAIL = ("Quarterly figures", "Hi Dana,\n\nThe quarterly figures for the Harbourline account are attached. "
        "Could you check the freight totals before Friday?\n\nThanks, Sam")
FAST = LearnSettings(idle_s=0.05, swap_every=2, passes=3)


def _loss(model: torch.nn.Module, learner: Learner, subject: str, body: str) -> float:
    x, y = learner.batch(prompt_text(subject, body))
    with torch.no_grad():
        from seqlab.evaluation.heldout import lm_loss

        return float(lm_loss(model(x)[0], y))


def _wait(predicate, seconds: float = 60.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + seconds
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("timed out")
        time.sleep(0.05)


def test_the_store_is_private_durable_and_skips_a_torn_line(tmp_path: Path) -> None:
    store = PersonalStore(tmp_path)
    assert store.append("Hi", "First body") == 1
    with open(tmp_path / PERSONAL / SENT, "ab") as f:
        f.write(b'{"t": 1, "subject": "torn')  # a kill in the middle of a line
    assert PersonalStore(tmp_path).append("Re: Hi", "Second body", context="First body") == 2
    emails = PersonalStore(tmp_path).emails()
    assert [(e.subject, e.body, e.context) for e in emails] == [("Hi", "First body", None),
                                                                ("Re: Hi", "Second body", "First body")]
    assert stat.S_IMODE((tmp_path / PERSONAL).stat().st_mode) == 0o700
    assert stat.S_IMODE((tmp_path / PERSONAL / SENT).stat().st_mode) == 0o600


@pytest.mark.parametrize("family", ["gru", "attention"])
def test_learning_lowers_the_loss_of_sent_mail_and_never_touches_the_served_model(
        family: str, tiny_run_dir: Path, word_run_dir: Path, tmp_path: Path) -> None:
    run = tiny_run_dir if family == "attention" else word_run_dir
    model, tok, _ = load_run(run, "cpu")
    before = {k: v.clone() for k, v in model.state_dict().items()}
    store = PersonalStore(tmp_path)
    store.append(*MAIL)
    swapped: list[torch.nn.Module] = []
    learner = Learner(model, tok, store, idle=lambda: True, on_swap=swapped.append, settings=FAST)
    base_loss = _loss(model, learner, *MAIL)
    learner.start()
    _wait(lambda: learner.describe()["learned_emails"] == 1 and swapped)
    learner.stop()
    assert learner.steps == FAST.passes and learner.failed is None
    learned = swapped[-1]
    assert _loss(learned, learner, *MAIL) < base_loss - 0.02  # it learned the person's email (3 small steps)
    assert not learned.training and not any(p.requires_grad for p in learned.parameters())
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())  # served weights untouched
    # the checkpoint holds exactly what was swapped in, and names the weights it grew from
    meta = json.loads((tmp_path / PERSONAL / LEARNED_META).read_text())
    assert meta["base"] == weights_digest(model) and meta["steps"] == FAST.passes
    assert meta["passes"] == {store.emails()[0].key(): 3}  # by the email's digest, not its place in the store
    assert stat.S_IMODE((tmp_path / PERSONAL / LEARNED).stat().st_mode) == 0o600
    again, _, _ = load_run(run, "cpu")
    assert load_learned(again, tmp_path / PERSONAL, weights_digest(model)) is not None
    assert all(torch.equal(a, b) for a, b in zip(again.state_dict().values(), learned.state_dict().values()))
    assert load_learned(again, tmp_path / PERSONAL, "another base") is None  # grown from other weights: ignored


def test_the_learner_waits_while_the_person_types(word_run_dir: Path, tmp_path: Path) -> None:
    model, tok, _ = load_run(word_run_dir, "cpu")
    store = PersonalStore(tmp_path)
    store.append(*MAIL)
    busy = True
    learner = Learner(model, tok, store, idle=lambda: not busy, on_swap=lambda m: None, settings=FAST)
    learner.start()
    time.sleep(0.8)
    assert learner.steps == 0  # not one step while requests keep coming
    busy = False
    _wait(lambda: learner.steps == FAST.passes)
    learner.stop()


def test_sent_mail_is_learned_swapped_in_and_kept_across_restarts(word_run_dir: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    _copy_run(word_run_dir, run)
    config = ServerConfig(run, min_confidence=0.0, log_dir=tmp_path / "log", learn=True, learn_settings=FAST)
    prompt = {"prefix": "Hi Dana,\n\nThe quarterly figures for the Harbourline", "subject": MAIL[0]}
    with ready_client(config) as client:
        first = client.post("/v1/complete", json=prompt).json()
        assert client.get("/health").json()["learning"]["emails"] == 0
        r = client.post("/v1/sent", json={"subject": MAIL[0], "body": MAIL[1]})
        assert r.status_code == 200 and r.json() == {"stored": True, "emails": 1}
        _wait(lambda: client.get("/health").json()["learning"]["learned_emails"] == 1)
        _wait(lambda: client.get("/v1/stats").json()["learning"]["swaps"] >= 2)
        # suggestions go on from the learned weights; the session a caller held was for the old model
        later = client.post("/v1/complete", json={**prompt, "session": first["session"]})
        assert later.status_code == 200 and later.json()["session"] != first["session"]
        learned_conf = later.json()["confidence"]
        steps = client.get("/health").json()["learning"]["steps"]
    # a new server on the same run starts from what was learned
    with ready_client(ServerConfig(run, min_confidence=0.0, log_dir=tmp_path / "log2", learn=True,
                                   learn_settings=FAST)) as client:
        assert client.get("/health").json()["learning"]["steps"] == steps
        assert client.post("/v1/complete", json=prompt).json()["confidence"] == pytest.approx(learned_conf, rel=1e-5)
    # forget: the trained model again, nothing of the person left in the run
    done = subprocess.run([sys.executable, "-m", "seqlab", "forget", str(run)], capture_output=True, text=True)
    assert done.returncode == 0 and "deleted" in done.stdout and not (run / PERSONAL).exists()
    with ready_client(ServerConfig(run, min_confidence=0.0, log_dir=tmp_path / "log3", learn=True,
                                   learn_settings=FAST)) as client:
        assert client.get("/health").json()["learning"]["steps"] == 0
        assert client.post("/v1/complete", json=prompt).json()["confidence"] == pytest.approx(
            first["confidence"], rel=1e-5)


def test_without_learn_no_text_is_stored(word_run_dir: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    _copy_run(word_run_dir, run)
    with ready_client(ServerConfig(run, min_confidence=0.0, log_dir=tmp_path / "log")) as client:
        r = client.post("/v1/sent", json={"subject": MAIL[0], "body": MAIL[1]})
        assert r.status_code == 409 and "--learn" in r.json()["error"]
        assert client.get("/health").json()["learning"] is False
    assert not (run / PERSONAL).exists()


def test_a_killed_learning_server_keeps_its_last_checkpoint(word_run_dir: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    _copy_run(word_run_dir, run)
    with served(run, tmp_path / "log", "--learn", "--min-confidence", "0") as s:
        for i in range(4):
            r = httpx.post(f"{s.url}/v1/sent", headers=s.headers(), timeout=30,
                           json={"subject": f"{MAIL[0]} {i}", "body": MAIL[1]})
            assert r.status_code == 200
        refused = subprocess.run([sys.executable, "-m", "seqlab", "forget", str(run)], capture_output=True,
                                 text=True)
        assert refused.returncode == 2 and "stop it" in refused.stderr  # not while a server is learning
        _wait(lambda: s.get("/health")["learning"]["swaps"] >= 1, seconds=120)
        os.kill(s.proc.pid, signal.SIGKILL)  # in the middle of whatever it was doing
        s.proc.wait()
    model, _, _ = load_run(run, "cpu")
    record = load_learned(model, run / PERSONAL, weights_digest(load_run(run, "cpu")[0]))
    assert record is not None and record["steps"] >= 1  # the last checkpoint, whole
    assert len(PersonalStore(run).emails()) == 4  # every acknowledged email is on disk


def _copy_run(src: Path, dst: Path) -> None:
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("serve", PERSONAL))


def test_a_reply_is_learned_with_the_message_it_answered(tmp_path: Path) -> None:
    """For a model that reads the replied-to message (cross-attention), a sent reply's step reads it too:
    the cross-attention weights move, and only with the context given."""
    from seqlab.config import ModelConfig
    from seqlab.data.tokenizer import ByteTokenizer
    from seqlab.models import build_model
    from seqlab.serving.personal import SentEmail

    tok = ByteTokenizer()
    torch.manual_seed(0)
    model = build_model(ModelConfig(vocab_size=tok.vocab_size, block_size=64, mixer="gru", pos="none", n_layer=1,
                                    n_embd=32, n_head=2, context="cross", ctx_block_size=64)).eval()
    xattn = [n for n, _ in model.named_parameters() if "xattn" in n]
    assert xattn
    for context, moves in ((None, False), ("Could you send the freight totals?", True)):
        learner = Learner(model, tok, PersonalStore(tmp_path), idle=lambda: True, on_swap=lambda m: None)
        start = {n: p.detach().clone() for n, p in learner.model.named_parameters()}
        learner.step(SentEmail(*MAIL, context=context))
        moved = any(not torch.equal(start[n], p) for n, p in learner.model.named_parameters() if n in xattn)
        assert moved == moves, context


# ----------------------------------------------------------------------------- forget cannot be fooled


def _serve_cmd(run: Path, log: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "seqlab", "serve", str(run), "--port", "0", "--log", str(log), *args]


def test_forget_refuses_while_a_server_learns_whatever_a_second_server_did(word_run_dir: Path,
                                                                         tmp_path: Path) -> None:
    """A learning server, then a second `serve` on the run (which overwrites server.json and deletes it when
    it stops), then `forget`: refused while the first still learns, and it deletes once that one stopped."""
    run = tmp_path / "run"
    _copy_run(word_run_dir, run)
    forget = [sys.executable, "-m", "seqlab", "forget", str(run)]
    with served(run, tmp_path / "log1", "--learn", "--min-confidence", "0") as first:
        r = httpx.post(f"{first.url}/v1/sent", headers=first.headers(), timeout=30,
                       json={"subject": MAIL[0], "body": MAIL[1]})
        assert r.status_code == 200
        _wait(lambda: first.get("/health")["learning"]["swaps"] >= 1, seconds=120)
        # a second learner on the same run is refused before it binds or writes anything
        second = subprocess.run(_serve_cmd(run, tmp_path / "log2", "--learn"), capture_output=True, text=True,
                                timeout=120)
        assert second.returncode == 2 and f"pid {first.proc.pid}" in second.stderr, second.stderr
        assert "Traceback" not in second.stderr
        # a second plain server runs, and takes server.json with it when it stops
        with served(run, tmp_path / "log3", "--min-confidence", "0") as plain:
            assert plain.get("/health")["learning"] is False
        assert not (run / "serve" / "server.json").exists()
        refused = subprocess.run(forget, capture_output=True, text=True, timeout=120)
        assert refused.returncode == 2 and f"pid {first.proc.pid}" in refused.stderr, refused.stderr
        assert "stop it" in refused.stderr and (run / PERSONAL / LEARNED).is_file()
        assert first.get("/health")["learning"]["failed"] is None
    done = subprocess.run(forget, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "personal/learned.safetensors" in done.stdout, done.stderr
    assert not (run / PERSONAL).exists()


def test_the_learner_never_writes_into_a_forgotten_folder(word_run_dir: Path, tmp_path: Path) -> None:
    """The epoch check alone (the folder deleted behind the lock's back, and a new one made in its place):
    the weights learned before are neither saved into the new folder nor served, and nothing more is stored."""
    from seqlab.serving.personal import Forgotten

    model, tok, _ = load_run(word_run_dir, "cpu")
    store = PersonalStore(tmp_path)
    store.append(*MAIL)
    calls, swapped, forgotten = [], [], []

    def idle() -> bool:
        calls.append(1)
        if len(calls) == 2:  # after one step was saved and swapped in: forgotten, and a new folder made
            shutil.rmtree(tmp_path / PERSONAL)
            PersonalStore(tmp_path).append("Another", "Written after the forget.")
        return True

    settings = LearnSettings(idle_s=0.0, swap_every=1, passes=3)
    learner = Learner(model, tok, store, idle=idle, on_swap=swapped.append, settings=settings,
                      on_forgotten=lambda: forgotten.append(1))
    learner.start()
    _wait(lambda: learner.failed is not None)
    learner.stop()
    assert learner.steps == 2 and len(swapped) == 1 and forgotten == [1]  # the second step: dropped
    assert "deleted" in learner.failed and learner.describe()["learned_emails"] == 0
    assert sorted(p.name for p in (tmp_path / PERSONAL).iterdir()) == [SENT]  # no learned weights written back
    with pytest.raises(Forgotten):
        store.append("Late", "Sent after the forget, to the server that learned before it.")
    assert [e.subject for e in PersonalStore(tmp_path).emails()] == ["Another"]


def test_a_learner_writes_nothing_after_stop_returns(word_run_dir: Path, tmp_path: Path) -> None:
    model, tok, _ = load_run(word_run_dir, "cpu")
    store = PersonalStore(tmp_path)
    store.append(*MAIL)
    swapped: list[torch.nn.Module] = []
    learner = Learner(model, tok, store, idle=lambda: True, on_swap=swapped.append)
    learner.step(store.emails()[0])
    learner.stop()  # as a server stops before giving up its lock (a step that outlived stop's wait)
    learner._publish()  # what that step's thread would do next
    assert not (tmp_path / PERSONAL / LEARNED).exists() and swapped == []


def test_pass_counts_follow_each_email_not_its_place(word_run_dir: Path, tmp_path: Path) -> None:
    model, tok, _ = load_run(word_run_dir, "cpu")
    settings = LearnSettings(idle_s=0.0, swap_every=100, passes=1)
    store = PersonalStore(tmp_path)
    store.append("First", "The first email, learned once.")
    store.append("Second", "The second email, learned once.")
    learner = Learner(model, tok, store, idle=lambda: True, on_swap=lambda m: None, settings=settings)
    learner.start()
    _wait(lambda: (tmp_path / PERSONAL / LEARNED_META).is_file())
    learner.stop()
    record = json.loads((tmp_path / PERSONAL / LEARNED_META).read_text())
    assert learner.steps == 2 and sorted(record["passes"].values()) == [1, 1]
    # the first email removed by hand, a third sent: by position the third would count as learned
    lines = (tmp_path / PERSONAL / SENT).read_text().splitlines(keepends=True)
    (tmp_path / PERSONAL / SENT).write_text(lines[1])
    store = PersonalStore(tmp_path)
    store.append("Third", "The third email, never learned yet.")
    again = Learner(model, tok, store, idle=lambda: True, on_swap=lambda m: None, settings=settings,
                    record=record)
    again.start()
    _wait(lambda: again.describe()["learned_emails"] == 2)
    again.stop()
    assert again.steps == record["steps"] + 1  # the third only, once
    # a record from before digests (passes by position) is read by position once, then kept by digest
    old = {**record, "passes": [1, 0]}
    legacy = Learner(model, tok, store, idle=lambda: True, on_swap=lambda m: None, settings=settings, record=old)
    legacy.start()
    _wait(lambda: legacy.describe()["learned_emails"] == 2)
    legacy.stop()
    assert legacy.steps == record["steps"] + 1
    assert set(json.loads((tmp_path / PERSONAL / LEARNED_META).read_text())["passes"]) == {
        e.key() for e in store.emails()}


# ----------------------------------------------------------------------------- what /v1/sent keeps


QUOTED = ("Thanks Dana, the freight totals look right to me.\n\n-- \nSam Jones\nHarbourline Ltd, 4 Quay St\n\n"
          "On Mon, 3 Mar 2025 at 09:12, Dana <dana@example.com> wrote:\n> Could you check them?\n> The PIN is 4411.")


def test_sent_keeps_only_what_the_person_wrote_and_is_capped(word_run_dir: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    _copy_run(word_run_dir, run)
    settings = LearnSettings(idle_s=3600.0, sent_burst=6, sent_every_s=3600.0, max_emails=2, max_body_bytes=1000)
    with ready_client(ServerConfig(run, min_confidence=0.0, log_dir=tmp_path / "log", learn=True,
                                   learn_settings=settings)) as client:
        ok = client.post("/v1/sent", json={"subject": "Re: totals", "body": QUOTED, "context": "Could you check?"})
        assert ok.status_code == 200 and ok.json() == {"stored": True, "emails": 1}
        empty = client.post("/v1/sent", json={"subject": "Fwd", "body": "> only the quoted original\n> nothing else"})
        assert empty.status_code == 422 and "nothing was stored" in empty.json()["error"]
        big = client.post("/v1/sent", json={"subject": "Long", "body": "word " * 400})  # 2,000 bytes of own words
        assert big.status_code == 413 and "nothing was stored" in big.json()["error"]
        assert client.post("/v1/sent", json={"subject": "Two", "body": "A second email."}).json()["emails"] == 2
        full = client.post("/v1/sent", json={"subject": "Three", "body": "A third email."})
        assert full.status_code == 507 and "full" in full.json()["error"]
        last = client.post("/v1/sent", json={"subject": "Four", "body": "A fourth email."})  # the rate's 6th
        assert last.status_code == 507
        limited = client.post("/v1/sent", json={"subject": "Five", "body": "A fifth email."})
        assert limited.status_code == 429 and int(limited.headers["retry-after"]) > 0
    records = [json.loads(line) for line in (run / PERSONAL / SENT).read_text().splitlines()]
    assert len(records) == 2
    assert records[0]["body"] == "Thanks Dana, the freight totals look right to me."  # no quote, no signature
    assert records[0]["origin"] == "person" and records[1]["origin"] == "person"
    assert "context" not in records[0]  # this model reads no context: the message answered is not kept
    assert not any("4411" in line or "Quay" in line for line in (run / PERSONAL / SENT).read_text().splitlines())


def test_the_store_refuses_past_its_bytes(tmp_path: Path) -> None:
    from seqlab.serving.personal import StoreFull

    store = PersonalStore(tmp_path, max_bytes=400)
    store.append("One", "x" * 200)
    with pytest.raises(StoreFull):
        store.append("Two", "y" * 200)
    assert len(PersonalStore(tmp_path).emails()) == 1
