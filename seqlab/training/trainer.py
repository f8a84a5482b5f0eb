"""The one training loop: AdamW or Muon, cosine or WSD, a weight average, clipping, accumulation,
evaluation, checkpoints, resume.

Attention models train on windows inside emails (`WindowSampler`); recurrent models train by truncated
BPTT over stream batches (`StreamSampler`): each batch lane reads emails in order, the hidden state is
carried (detached) from one chunk to the next and reset by the model at every email start.

The loop (`_run`) steps and then delegates each decision to the part that owns it: the guard
(`guards.StepGuard`: skipped steps, halting), the validator and the best so far (`validation`), the
checkpointer (`checkpointer`: when to save, what a save holds); the run's logs are in `run_log`.

Exact resume: the batch of step s is a pure function of (seed, s); every stateful part (optimizer,
counters, best, RNG states, carried stream state; `train_state`) goes into `trainer_state.pt` through its
`state_dict()`, so a run killed at any point and resumed from its last checkpoint ends with weights bitwise
equal to an uninterrupted run (CPU, fixed threads).

Under torchrun the same loop runs on every rank with DistributedDataParallel; what the ranks share, agree
on and save is in `seqlab.training.distributed` (`self.dist`, a one-process `World` without torchrun).
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import torch

from seqlab.config import RunConfig, resolve_overrides
from seqlab.data.batches import WindowSampler
from seqlab.data.store import TokenStore, check_tokenizer, load_meta
from seqlab.data.streams import StreamSampler
from seqlab.data.tokenizer import Tokenizer, load_tokenizer
from seqlab.errors import UserError
from seqlab.evaluation.heldout import lm_loss
from seqlab.models import build_model
from seqlab.models.lm import LMState
from seqlab.private_files import make_private_dirs
from seqlab.runs.checkpoint import LoadedCheckpoint, load_latest
from seqlab.runs.init import init_weights
from seqlab.runs.load import checkpoint_config, resolve_device
from seqlab.runs.precision import autocast_for, resolve_precision
from seqlab.training import guards
from seqlab.training.checkpointer import Checkpointer
from seqlab.training.context_feed import ContextFeed
from seqlab.training.cpu_allocator import keep_freed_memory
from seqlab.training.cpu_threads import ThreadChooser
from seqlab.training.distributed import NoLock, World
from seqlab.training.ema import WeightAverage
from seqlab.training.flops import MFUMeter
from seqlab.training.optim import lr_at, make_optimizer
from seqlab.training.progress import Progress, ProgressBar, StepReport, StopFlag
from seqlab.training.run_log import RunLog, saved_recipe
from seqlab.training.train_state import DataPosition, RngState, StreamCarry
from seqlab.training.validation import BestTracker, Validator

__all__ = ["StepReport", "Trainer", "train"]

OnStep = Callable[[StepReport], None]


class Trainer:
    """Trains `cfg` on DATA_DIR into RUN_DIR. `run()` returns a summary dict."""

    def __init__(self, data_dir: Path, run_dir: Path, cfg: RunConfig | None = None, *, resume: bool = False,
                 overrides: Sequence[str] = (), progress: bool = True, init: Path | None = None,
                 on_step: OnStep | None = None, announce: bool = True, recipe: dict[str, Any] | None = None) -> None:
        """With `resume`, the config comes from RUN_DIR's newest good checkpoint (plus `overrides`, e.g.
        a longer train.max_steps); otherwise `cfg` (plus `overrides`) is used. A new run with `init` starts
        from that run's weights (`seqlab.runs.init`; `cfg` should be its `init_config`). `on_step`, when
        given, is called on rank 0 after every step with a `StepReport`; `announce` prints where a resumed run
        continues (the summary's `resumed_at` says it either way). `recipe` is the recipe table's choice that
        made `cfg` (`training/recipe_table.py`), kept in run.json; a resumed run keeps the one it had."""
        self.data_dir, self.run_dir, self.show_progress = Path(data_dir), Path(run_dir), progress
        self.recipe = recipe if recipe is not None or not resume else saved_recipe(self.run_dir)
        self.init, self.on_step, self.announce = init, on_step, announce
        self.resumed_at: int | None = None
        self.dist = World.from_env()  # under torchrun: this rank's place; alone: World() and no process group
        if resume and self.dist.is_main and not self.run_dir.is_dir():  # said before the lock would create it
            raise UserError(f"--resume was given but {self.run_dir} holds no complete checkpoint")
        # one trainer per RUN_DIR, before anything in it is read; only rank 0 ever touches RUN_DIR
        self.lock = guards.RunLock(self.run_dir) if self.dist.is_main else NoLock()
        try:
            self._open(cfg, resume, overrides)
        except BaseException:
            self.lock.discard()  # refused before anything was written: no empty RUN_DIR left behind
            raise

    def _open(self, cfg: RunConfig | None, resume: bool, overrides: Sequence[str]) -> None:
        meta = load_meta(self.data_dir)
        self.tok: Tokenizer = load_tokenizer(self.data_dir / "tokenizer.json")
        check_tokenizer(self.data_dir, meta, self.tok.vocab_size, self.tok.sha256())
        skipped: list[str] = []  # why each damaged checkpoint was passed over, to name the file below
        ckpt = load_latest(self.run_dir, skipped=skipped) if resume and self.dist.is_main else None
        ckpt = self.dist.share_checkpoint(ckpt)  # rank 0's, on every rank
        if resume and ckpt is None:
            raise UserError(f"--resume was given but {self.run_dir} holds no complete checkpoint"
                            + (f": {skipped[0]}" if skipped else ""))
        if ckpt is not None and ckpt.tokenizer_json not in (None, self.tok.to_json()):
            raise UserError(f"{ckpt.path / 'tokenizer.json'} is not {self.data_dir / 'tokenizer.json'}: the run "
                            "was trained with another tokenizer; resume on the data folder the run started on")
        cfg = self._config(cfg, ckpt, overrides)
        self.cfg, t = cfg, cfg.train
        self.threads = ThreadChooser(t.threads)  # train.threads, else OMP_NUM_THREADS, else the free cores
        self.threads.apply()
        self.device = self.dist.device(resolve_device(t.device))
        self.mode = cfg.data.resolved_mode(cfg.model.mixer)
        if self.mode == "stream" and cfg.model.pos == "learned":
            raise UserError("model.pos=learned cannot be used with data.mode=stream: long emails run past the "
                            "learned positions; use model.pos=none or sinusoidal")
        self.train_store, self.val_store = TokenStore(self.data_dir, "train"), TokenStore(self.data_dir, "val")
        if self.train_store.num_emails == 0:
            raise UserError(f"{self.data_dir} has no training emails")
        self.meta = meta
        self._setup(ckpt)

    def _config(self, cfg: RunConfig | None, ckpt: LoadedCheckpoint | None, overrides: Sequence[str]) -> RunConfig:
        base = checkpoint_config(ckpt) if ckpt is not None else cfg
        if base is None:
            raise ValueError("Trainer needs a RunConfig unless it resumes")
        try:
            new, self.derived = resolve_overrides(base, list(overrides))
        except ValueError as exc:
            raise UserError(str(exc)) from None
        # the data decides the vocabulary
        new = dataclasses.replace(new, model=dataclasses.replace(new.model, vocab_size=self.tok.vocab_size))
        if ckpt is not None and base.model != new.model:
            raise UserError(f"model settings cannot change when resuming {self.run_dir}; only train.* and data.* can")
        return new

    def _setup(self, ckpt: LoadedCheckpoint | None) -> None:
        """Build the model, its optimizer and the loop's helpers; resume them from `ckpt` when given."""
        cfg, t = self.cfg, self.cfg.train
        torch.manual_seed(t.seed)
        self.model = build_model(cfg.model).to(self.device)
        if self.init is not None and ckpt is None:  # before the optimizer sees the weights; resuming wins
            init_weights(self.model, cfg, self.init, self.tok, self.data_dir)
        self.dist.seed_rank(t.seed)
        self.opt = make_optimizer(self.model, t.lr, t.weight_decay, (t.beta1, t.beta2), self.device, t.optimizer)
        self.ema = WeightAverage(self.model, t.ema) if t.ema else None  # validated and saved in place of the raw
        self.sampler = self._sampler()
        eval_store = self.val_store if self.val_store.num_emails else self.train_store
        self.validator = Validator(self.model, eval_store, cfg, self.tok, self.device, self.dist, self.ema)
        self.contexts = ContextFeed(cfg, self.sampler, eval_store, self.device)  # contexts: None without cross-attn
        self.progress, self.best, self.carry = Progress(), BestTracker(), StreamCarry(self.device)
        self.guard = guards.StepGuard(t.max_bad_steps, speak=self.dist.is_main)
        self.log = RunLog(self.run_dir, self.dist.is_main)  # metrics.jsonl and run.json
        parts = {"optimizer": self.opt, "progress": self.progress, "best": self.best,
                 "data": DataPosition(self.mode, t.seed, self.progress)}
        self.checkpointer = Checkpointer(self.run_dir, t.ckpt_every, self.model, self.ema, parts,
                                         {"rng": RngState(), "stream_state": self.carry}, dist=self.dist,
                                         guard=self.guard, config_json=cfg.to_json(), tokenizer_json=self.tok.to_json())
        if self.dist.is_main:
            make_private_dirs(self.run_dir)
        if ckpt is not None:
            self._resume(ckpt)
        elif self.dist.is_main and (self.run_dir / "trainer_state.pt").exists():
            raise UserError(f"{self.run_dir} already holds a run; pass --resume to continue it or choose another --out")
        self.ddp = self.dist.wrap(self.model)  # DistributedDataParallel under torchrun, else the model itself
        self.step_model = torch.compile(self.ddp) if t.compile else self.ddp
        self.precision = resolve_precision(t.precision, self.device)  # "fp32" or "bf16"
        self.autocast = autocast_for(self.precision, self.device)  # the forward pass; the loss is float32
        self.validator.autocast = self.autocast
        self.mfu = MFUMeter(self.model, cfg.model, self.device, self.precision == "bf16")
        self.step_tokens = t.batch_size * t.grad_accum * cfg.model.block_size  # processed, padding included

    def _sampler(self) -> StreamSampler | WindowSampler:
        """This rank's batches: lanes of the email stream (recurrent models) or windows inside emails."""
        cfg, t = self.cfg, self.cfg.train
        shard = self.dist.shard(t.batch_size)  # this rank's rows of the global batch
        if self.mode == "stream":
            return StreamSampler(self.train_store, cfg.model.block_size, t.batch_size, t.seed, self.tok.pad_id,
                                 shard=shard)
        return WindowSampler(self.train_store, cfg.model.block_size, t.batch_size, t.seed, self.tok.pad_id,
                             min_window_tokens=cfg.data.min_window_tokens, shard=shard)

    def _resume(self, ckpt: LoadedCheckpoint) -> None:
        self.checkpointer.load(ckpt)
        if self.dist.is_main:
            self.log.truncate(self.progress.step)
            self.resumed_at = self.progress.step  # in the summary, for a caller that does not print
            if self.announce:
                print(f"resumed {self.run_dir} at step {self.progress.step}")

    @property
    def stream_state(self) -> LMState | None:
        """The hidden state carried between stream chunks (None for window training)."""
        return self.carry.state

    # ------------------------------------------------------------ steps

    def _batches(self, step: int) -> Iterator[tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, Any]]:
        """The grad_accum micro-batches of one step: (x, y, reset, context)."""
        for micro in range(self.cfg.train.grad_accum):
            index = step * self.cfg.train.grad_accum + micro
            if self.mode == "stream":
                x, y, reset = self.sampler.batch(index)
                yield x.to(self.device), y.to(self.device), reset.to(self.device), self.contexts.train(index)
            else:
                x, y = self.sampler.batch(index)
                yield x.to(self.device), y.to(self.device), None, self.contexts.train(index)

    def _time_frac(self) -> float:
        """Share of the wall-clock budget used so far (0 without a budget)."""
        t = self.cfg.train
        return self.progress.elapsed / (t.max_minutes * 60) if t.max_minutes else 0.0

    def train_step(self, step: int) -> tuple[float, str | None]:
        """One optimizer step; returns the mean training loss over its micro-batches, and why the step was
        not applied when its loss or gradient norm is NaN or infinite (then the weights, the optimizer
        and the carried stream state stay as they were; `guards`)."""
        t = self.cfg.train
        for group in self.opt.param_groups:
            group["lr"] = lr_at(step, t.lr, t.warmup_steps, t.max_steps, t.min_lr_ratio, self._time_frac(),
                                t.schedule, t.cooldown_frac)
        self.model.train()
        total, tokens, state_before, skipped = 0.0, 0, self.carry.state, None
        for micro, (x, y, reset, context) in enumerate(self._batches(step)):
            with self.dist.micro_step(self.ddp, last=micro == t.grad_accum - 1):  # one all-reduce per step
                with self.autocast():
                    extra = {"context": context} if context is not None else {}  # only a context model reads one
                    logits, state = self.step_model(x, state=self.carry.state, reset=reset, **extra)
                    # under torchrun, this rank's share of the whole micro-batch's mean loss
                    loss = self.dist.lm_loss(logits, y) if self.dist.active else lm_loss(logits, y)
                tokens += int((x != self.tok.pad_id).sum())
                if not math.isfinite(value := loss.item()):  # its gradient is no better: do not accumulate it
                    skipped = guards.NONFINITE_LOSS
                    if not self.dist.active:  # under torchrun every rank runs every backward (they all-reduce)
                        break
                (loss / t.grad_accum).backward()
            total += value
            if self.mode == "stream":  # truncated BPTT: keep the state, cut the graph
                self.carry.state = self.contexts.carry(state.detach())
        if skipped is None and not math.isfinite(guards.grad_norm(self.model, t.grad_clip)):
            skipped = guards.NONFINITE_GRAD
        total, tokens, skipped = self.dist.agree_step(total, tokens, skipped)  # any rank's bad step skips all
        self.progress.tokens += tokens
        if skipped is None:
            self.opt.step()
            if self.ema is not None:
                self.ema.update()
        else:
            self.carry.state = state_before
        self.opt.zero_grad(set_to_none=True)
        return total / t.grad_accum, skipped

    def evaluate(self) -> dict[str, float]:
        """Loss per target token (nats), bits per byte and perplexity on the fixed validation emails
        (`Validator.validate`)."""
        return self.validator.validate()

    # ------------------------------------------------------------ the loop

    def run(self) -> dict[str, Any]:
        """Train until a stop (`_should_stop`); the summary's "failed" is True when the run halted on
        non-finite steps or weights. RUN_DIR stays locked until the run ends."""
        self.lock.acquire()  # again, if a previous run() of this trainer released it
        try:
            return self._run()
        finally:
            self.lock.release()

    def _run(self) -> dict[str, Any]:
        """The loop: step, then hand the step's decisions to the helpers that own them (`_after_step`)."""
        t, s = self.cfg.train, self.progress
        self._write_run_info()
        bar = ProgressBar(s, t.max_steps, t.max_minutes, show=self.show_progress and self.dist.is_main)
        reason, loss, dt, start_step = None, float("nan"), 0.0, s.step
        # freed activations kept for the next step on a CPU (training/cpu_allocator.py)
        with StopFlag() as flag, keep_freed_memory(self.device.type == "cpu"):
            while (reason := self._should_stop(flag)) is None:
                start, tokens_before = time.perf_counter(), s.tokens
                step_loss, skipped = self.train_step(s.step)
                dt = time.perf_counter() - start
                s.step += 1
                s.elapsed += dt
                self.threads.tick()  # follows the free cores when train.threads is not set (training/cpu_threads.py)
                if skipped is None:
                    loss, s.bad_in_a_row = step_loss, 0
                self._after_step(loss, dt, s.tokens - tokens_before, skipped=skipped)
                bar.update(s, s.tokens - tokens_before, dt, loss, self.step_tokens, self.mfu.of)
                self._report(step_loss)
            bar.close()
            self._finish(ran=s.step > start_step, loss=loss, dt=dt)
        summary = self._summary(reason)
        self._write_run_info(summary)
        return summary

    def _should_stop(self, flag: StopFlag) -> str | None:
        t, s = self.cfg.train, self.progress
        self.dist.agree_stop(s, flag)  # ranks stop together: any rank's signal, the slowest rank's clock
        if self.guard.halt:
            return self.guard.halt
        if flag.raised:
            return f"stopped by {flag.raised}"
        if s.step >= t.max_steps:
            return "reached train.max_steps"
        if t.max_minutes and s.elapsed >= t.max_minutes * 60:
            return "reached train.max_minutes"
        if self.best.stalled(t.early_stop):
            return f"early stop: no validation improvement in {t.early_stop} evaluations"
        return None

    def _after_step(self, loss: float, dt: float, tokens: int, skipped: str | None = None,
                    final: bool = False) -> None:
        """Log the step, validate and track the best, save: each when its owner says it is due. `final`
        is the run's end between validations: validate and save whatever the step."""
        step = self.progress.step
        record = self._step_record(loss, dt, tokens, skipped, final)
        validate = final or self.validator.should_validate(step)
        # halted: nothing is measured or saved after the last good checkpoint
        if not self.guard.may_go_on(self.model, step, check=validate or self.checkpointer.should_save(step)):
            validate = False
        best = validate and self._validate(record)
        if record:
            self.log.append(record)
        self.checkpointer.maybe_save(step, best=best, final=final)

    def _step_record(self, loss: float, dt: float, tokens: int, skipped: str | None, final: bool) -> dict[str, Any]:
        """The step's metrics.jsonl record: a skipped step, or every train.log_every steps the training
        numbers (nothing at the run's end, which adds only the validation)."""
        t, s = self.cfg.train, self.progress
        if skipped:
            return self.guard.bad_step(s, skipped)
        if final or not (s.step % t.log_every == 0 or s.step == t.max_steps):
            return {}
        return {"step": s.step, "train_loss": round(loss, 5), "lr": self.opt.param_groups[0]["lr"],
                "tokens_per_s": round(tokens / max(dt, 1e-9), 1), "elapsed": round(s.elapsed, 2),
                "mfu": round(self.mfu.of(self.step_tokens / max(dt, 1e-9)), 4)}

    def _validate(self, record: dict[str, Any]) -> bool:
        """Validate, add the numbers to `record`, and say whether they are the best so far."""
        s = self.progress
        ev = self.evaluate()
        self.validator.keep(s.step, ev)
        record.update({"step": s.step, **{k: round(v, 5) for k, v in ev.items()}, "elapsed": round(s.elapsed, 2)})
        return self.best.update(s.step, ev["val_loss"])

    def _finish(self, ran: bool, loss: float, dt: float) -> None:
        """After the last step of a session that stepped and did not halt (then the newest checkpoint is
        the last good one): validate and save the final weights, unless that step already did."""
        if not ran or self.guard.halt:
            return
        step = self.progress.step
        if self.validator.result_at(step) is None:  # stopped between validations (budget, signal)
            self._after_step(loss, dt, 0, final=True)
        elif self.checkpointer.last_step != step:
            self.checkpointer.save(step)

    def _summary(self, reason: str | None) -> dict[str, Any]:
        s = self.progress
        return {"stopped": reason, "steps": s.step, "best_val_loss": self.best.best_val,
                "best_step": self.best.best_step, "elapsed_s": round(s.elapsed, 2), "tokens": s.tokens,
                "tokens_per_s": round(s.tokens / max(s.elapsed, 1e-9), 1), "params": self.model.num_params(),
                "skipped_steps": s.skipped_steps, "failed": self.guard.halt is not None,
                "resumed_at": self.resumed_at, "derived_settings": self.derived}

    def _report(self, loss: float) -> None:
        """Hand the caller's `on_step` this step's numbers (rank 0 only, as the bar)."""
        if self.on_step is None or not self.dist.is_main:
            return
        s, ev = self.progress, self.validator.result_at(self.progress.step)
        self.on_step(StepReport(step=s.step, max_steps=self.cfg.train.max_steps, loss=loss, elapsed_s=s.elapsed,
                                tokens=s.tokens, val_loss=None if ev is None else ev["val_loss"],
                                val_bpb=None if ev is None else ev["val_bpb"]))

    def close(self) -> None:
        """Under torchrun, leave the process group; the DDP wrapper, which holds on to it, goes first."""
        self.ddp = self.step_model = self.model
        self.dist.close()

    def _write_run_info(self, summary: dict[str, Any] | None = None) -> None:
        """run.json: where the data is and what ran it, then the final summary."""
        self.log.write_info({"data_dir": str(self.data_dir.resolve()), "device": str(self.device), "mode": self.mode,
                             "params": self.model.num_params(), "world_size": self.dist.size,
                             "thread_choice": self.threads.describe(),  # who set the count, the free cores it followed
                             "precision": self.precision,
                             "derived_settings": self.derived,  # config.MIXER_RULES applied to the overrides
                             "recipe": self.recipe},  # the recipe table's choice, when no preset was named
                            summary)


def train(data_dir: Path, run_dir: Path, cfg: RunConfig | None = None, *, resume: bool = False,
          overrides: Sequence[str] = (), progress: bool = True, init: Path | None = None,
          on_step: OnStep | None = None, announce: bool = True, recipe: dict[str, Any] | None = None) -> dict:
    """Train a model as `cfg` (or, resuming, the saved config) says, with `overrides` applied; returns
    the summary also written to RUN_DIR/run.json. `on_step` is called after every step (`StepReport`)."""
    trainer = Trainer(data_dir, run_dir, cfg, resume=resume, overrides=overrides, progress=progress, init=init,
                      on_step=on_step, announce=announce, recipe=recipe)
    try:
        return trainer.run()
    finally:
        trainer.close()
