"""Learning from the person's own writing while the server is idle (`seqlab serve --learn`).

Gmail's Smart Compose blends a personal model into its suggestions; a local server can do better and learn
from every email the person finishes, on their own machine. `Learner` keeps a training copy of the served
model and, on a thread of its own, fine-tunes it on the sent emails of `PersonalStore` in small steps:

- Only when the server is idle (no request for `idle_s` seconds and none waiting), one step at a time, so a
  keystroke never waits for learning: a step that is running when one arrives finishes on the other core.
- One step is one email (its tokens as training saw emails: bos, subject, blank line, body, eos), cut into
  windows the model can read, with AdamW at a small learning rate and the gradient clipped; each email is
  learned from `passes` times, the least-learned first, the newest among equals. The passes are counted per
  email by its digest (`SentEmail.key`), so a count never moves to another email.
- Every `swap_every` steps, and when there is nothing left to learn, a frozen copy of the training model is
  handed to `on_swap`, which replaces the served model on the model thread between two requests (a request
  never sees weights that are half updated: the served model is never written to, it is replaced whole).
- Before its first step on an email it hands the email and the weights that have not learned from it to
  `before_learning`, and with nothing left to learn and the server idle, it runs its `idle_task` when that
  is due: typing each email held out, and refitting the served threshold, the memory's weight and the model
  served on the person's sent mail (`recalibrate.Recalibrator`).
- The same weights are checkpointed to RUN_DIR/personal/learned.safetensors (0600, written whole and renamed
  over, so a kill leaves the last checkpoint) with learned.json naming the base weights they started from;
  the next `serve --learn` of the same run starts from them. `seqlab forget RUN` deletes both.
- Before it saves or swaps, it checks that the personal folder is still the one it learned from
  (`PersonalStore.forgotten`): if it was deleted, what was learned is dropped, never written back, the
  trained model is served again (`on_forgotten`) and the learner stops. After `stop()` returns it writes
  nothing more.
"""

from __future__ import annotations

import copy
import hashlib
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from seqlab.data.batches import IGNORE_INDEX
from seqlab.data.mail.clean import CleanOptions, clean_body
from seqlab.data.mail.reader import original_text
from seqlab.data.tokenizer import Tokenizer
from seqlab.durable import atomic_write_bytes
from seqlab.errors import UserError
from seqlab.evaluation.heldout import lm_loss
from seqlab.generation.decode import context_limit
from seqlab.generation.reply import reads_context, reply_context
from seqlab.runs.checkpoint_files import apply_weights, weights_from_bytes, weights_to_bytes
from seqlab.serving.engine import prompt_text
from seqlab.serving.personal import LEARNED, LEARNED_META, PersonalStore, SentEmail


@dataclass(frozen=True)
class LearnSettings:
    """How the server learns: small steps at a small rate, a few passes over each email."""

    lr: float = 3e-4  # a tenth of the recipe's training rate: nudge the general model, do not replace it
    passes: int = 2  # times each sent email is learned from
    idle_s: float = 1.0  # quiet time before a step: typing pauses are shorter than this
    swap_every: int = 8  # steps between two swaps of the served model (and checkpoints)
    max_tokens: int = 512  # of one email: a recurrent model reads them in one sequence
    clip: float = 1.0
    # what /v1/sent accepts (`routes.sent`): the body once cleaned, sends per caller, the store's size
    max_body_bytes: int = 32 * 1024  # far more than anyone writes by hand, and 64 times what one step reads
    sent_burst: int = 20  # sends a caller may make at once ...
    sent_every_s: float = 30.0  # ... then one more every this many seconds (two a minute)
    max_emails: int = 20_000
    max_store_bytes: int = 64 * 2**20


def weights_digest(model: nn.Module) -> str:
    """SHA-256 of a model's weights (each tensor's name, dtype, shape and values, in name order): which
    trained model learned weights grew from. Not of the safetensors bytes, whose layout can differ for the
    same weights (tied tensors are found by storage, which a first forward pass may rearrange)."""
    h = hashlib.sha256()
    for name, t in sorted(model.state_dict().items()):
        t = t.detach().cpu().contiguous()
        h.update(f"{name}:{t.dtype}:{tuple(t.shape)};".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


def load_learned(model: nn.Module, folder: Path, base: str) -> dict[str, Any] | None:
    """Load folder's learned weights into `model` if they grew from the base weights `base`; their record
    (steps, emails seen, passes per email digest; a list by position in an older record), or None when
    there are none for this model."""
    meta_path, weights_path = folder / LEARNED_META, folder / LEARNED
    if not (meta_path.is_file() and weights_path.is_file()):
        return None
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(meta, dict) or meta.get("base") != base:
        return None  # learned on other weights (the run was trained further): start again from these
    apply_weights(model, weights_from_bytes(weights_path.read_bytes(), str(weights_path)), str(weights_path))
    return meta


class Learner:
    """Fine-tunes a copy of `model` on the person's sent emails while the server is idle (module docstring).

    `idle()` says whether the server is idle now; `on_swap(model)` gets each frozen learned copy (eval mode,
    never written to again); `on_forgotten()` is called once if the personal folder is deleted under it.
    Start with `start()`, wake after a new email with `notify()`, end with `stop()`.
    """

    def __init__(self, model: nn.Module, tokenizer: Tokenizer, store: PersonalStore, idle: Callable[[], bool],
                 on_swap: Callable[[nn.Module], None], settings: LearnSettings | None = None,
                 base: str | None = None, record: dict[str, Any] | None = None,
                 on_forgotten: Callable[[], None] | None = None) -> None:
        self.settings = settings or LearnSettings()
        self.tokenizer, self.store, self.idle, self.on_swap = tokenizer, store, idle, on_swap
        self.on_forgotten = on_forgotten
        self.base = base or weights_digest(model)
        self.model = copy.deepcopy(model).train()
        for p in self.model.parameters():
            p.requires_grad_(True)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=self.settings.lr, weight_decay=0.0)
        self.limit = context_limit(model)
        record = record or {}
        self.steps = int(record.get("steps", 0))
        passes = record.get("passes", {})
        # an older record counted by position in the store: read once against the store as it is, then by digest
        self._by_position = [int(n) for n in passes] if isinstance(passes, list) else None
        self.passes: dict[str, int] = ({str(k): int(n) for k, n in passes.items()} if isinstance(passes, dict)
                                       else {})
        self._keys: list[str] = []  # the stored emails' digests, in order
        self.swaps = 0
        self.last_loss: float | None = None
        self.failed: str | None = None
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._writing = threading.Lock()  # a save and swap is whole, and none starts after `stop` returns
        self._closed = False
        self._dropped = False  # what was learned was dropped: its personal folder was deleted
        # work for idle time once nothing is left to learn: refitting the served setting (`recalibrate.py`);
        # anything with due() -> bool and run()
        self.idle_task: Any = None
        # called with each email and the training model (in eval mode) before the first step on that email:
        # typing it held out for the refit (`recalibrate.Recalibrator.observe`)
        self.before_learning: Callable[[SentEmail, nn.Module], None] | None = None

    # ----------------------------------------------------------------------------- the thread

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="seqlab-learner", daemon=True)
        self._thread.start()

    def notify(self) -> None:
        """A new email was stored: look for work now rather than at the next poll."""
        self._wake.set()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop learning: the last steps are saved if the thread ends within `timeout`, and nothing is
        written after this returns (the caller may then give up the run's learning lock)."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)
        with self._writing:
            self._closed = True

    def _run(self) -> None:
        dirty = 0  # steps since the last swap
        emails: list[SentEmail] = []
        while not self._stop.is_set():
            if self.store.forgotten():
                self._forgotten()
                return
            if len(self.store) != len(emails) or not self._keys:  # reread only when an email was added
                emails = self.store.emails()
                self._keys = [e.key() for e in emails]
                if self._by_position is not None:
                    self.passes = {k: n for k, n in zip(self._keys, self._by_position)}
                    self._by_position = None
            todo = [i for i, k in enumerate(self._keys) if self.passes.get(k, 0) < self.settings.passes]
            if not todo:
                if dirty:
                    self._publish()
                    dirty = 0
                if self.idle_task is not None and self.idle_task.due() and self.idle():
                    self.idle_task.run()
                    continue
                self._wake.wait(5.0)
                self._wake.clear()
                continue
            if not self.idle():
                self._wake.wait(0.2)  # a person typing: ask again shortly, never in their way
                self._wake.clear()
                continue
            i = min(todo, key=lambda j: (self.passes.get(self._keys[j], 0), -j))
            if self.before_learning is not None and not self.passes.get(self._keys[i], 0):
                self.model.eval()
                try:
                    self.before_learning(emails[i], self.model)
                finally:
                    self.model.train()
            try:
                self.last_loss = self.step(emails[i])
            except Exception as exc:  # noqa: BLE001 (reported by /health; serving goes on with the model it has)
                self.failed = f"{type(exc).__name__}: {exc}"
                return
            self.passes[self._keys[i]] = self.passes.get(self._keys[i], 0) + 1
            dirty += 1
            if dirty >= self.settings.swap_every:
                self._publish()
                dirty = 0
        if dirty:
            self._publish()

    # ----------------------------------------------------------------------------- learning

    def batch(self, text: str) -> tuple[torch.Tensor, torch.Tensor]:
        """An email's training windows: x, y (B, T) long, y the next tokens (IGNORE_INDEX past the end).

        The ids are the email as training saw it (bos, text, eos), at most `max_tokens`; a model with a
        context limit reads them in windows of that many tokens, a recurrent one in one sequence."""
        tok = self.tokenizer
        ids = [tok.bos_id, *tok.encode(text), tok.eos_id][: self.settings.max_tokens + 1]
        width = min(self.limit or len(ids) - 1, len(ids) - 1)
        rows = []
        for start in range(0, len(ids) - 1, width):
            chunk = ids[start:start + width + 1]
            x = chunk[:-1] + [tok.pad_id] * (width - len(chunk) + 1)
            y = chunk[1:] + [IGNORE_INDEX] * (width - len(chunk) + 1)
            rows.append((x, y))
        x = torch.tensor([r[0] for r in rows], dtype=torch.long)  # (B, T)
        y = torch.tensor([r[1] for r in rows], dtype=torch.long)  # (B, T)
        return x, y

    def step(self, email: Any) -> float:
        """One gradient step on one email (with the message it answered, for a model that reads one, as
        the server reads it: `original_text` of it); its loss in nats per token before the step."""
        # cleaned as prepare cleans training mail: the quoted original and the signature are not the person's
        # writing of this email (a reply's original reaches a context-reading model as its context instead)
        body = clean_body(email.body, CleanOptions()) or email.body
        x, y = self.batch(prompt_text(email.subject, body))
        extra = {}
        if email.context and reads_context(self.model):
            ctx = reply_context(self.model, self.tokenizer, original_text(email.context.encode("utf-8", "replace")))
            extra["context"] = ctx.expand(x.size(0))  # one lane per window of the email
        logits, _ = self.model(x, **extra)  # (B, T, V)
        loss = lm_loss(logits, y)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.settings.clip)
        self.optimizer.step()
        self.steps += 1
        return float(loss.detach())

    def _publish(self) -> None:
        """Checkpoint the learned weights, then hand a frozen copy to be served; neither once the personal
        folder was forgotten, nor after `stop` returned."""
        frozen = copy.deepcopy(self.model).eval()
        for p in frozen.parameters():
            p.requires_grad_(False)
        folder = self.store.folder
        with self._writing:
            if self._closed:
                return
            if self.store.forgotten():  # the epoch: what was learned before a forget is never written back
                self._forgotten()
                return
            keys = set(self._keys)
            passes = {k: n for k, n in self.passes.items() if k in keys}  # of the emails still stored
            try:  # never creates the folder: a deleted one stays deleted
                atomic_write_bytes(folder / LEARNED, weights_to_bytes(frozen), mode=0o600)
                meta = {"base": self.base, "steps": self.steps, "passes": passes, "emails": len(passes),
                        "t": time.time()}
                atomic_write_bytes(folder / LEARNED_META, json.dumps(meta, indent=1).encode("utf-8"), mode=0o600)
            except (OSError, UserError) as exc:  # a full disk (DiskFullError): serve what was learned, say so
                self.failed = f"the learned weights could not be saved in {folder}: {exc}"
            self.swaps += 1
            self.on_swap(frozen)

    def _forgotten(self) -> None:
        """The personal folder was deleted under a running learner: drop what was learned and stop."""
        if self._dropped:
            return
        self._dropped = True
        self.failed = (f"{self.store.folder} was deleted while the server learned: what was learned is dropped "
                       "and the trained model served; restart the server to learn again")
        self.passes, self._keys = {}, []
        self._stop.set()
        if self.on_forgotten is not None:
            self.on_forgotten()

    def describe(self) -> dict[str, Any]:
        """What it has learned so far, for /health and /v1/stats."""
        keys, passes = self._keys, self.passes
        out = {"emails": len(self.store), "steps": self.steps, "swaps": self.swaps,
               "learned_emails": sum(passes.get(k, 0) >= self.settings.passes for k in keys),
               "last_loss": self.last_loss, "failed": self.failed}
        if self.idle_task is not None:  # why the idle work stopped, if it did (it is not retried)
            out["idle_task_failed"] = getattr(self.idle_task, "failed", None)
        return out
