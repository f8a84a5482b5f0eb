"""`seqlab.load` and `Run`: a trained RUN_DIR from Python, the one path `seqlab complete`, `eval`, `calibrate`,
`phrases`, `attention` and `inspect` take too.

A `Run` loads its best checkpoint (`seqlab.runs.load.load_run`) the first time something needs the model,
and keeps it. Its methods return values, never print: `complete` a `Completion`, `score` a `Score`,
`next_tokens` a list of `NextToken`, `attention` an `Attention`, `inspect` an `Inspection`, `evaluate` and
`calibrate` the dicts `seqlab eval --json` and `seqlab calibrate` report.

The keyword arguments of `complete`, `evaluate`, `tradeoff`, `calibrate` and `fit_phrases` are the fields of
their options dataclass (`seqlab.options`), one to one and with its defaults: the command line passes its
options as them, and a bad value is a `UserError` that names the argument.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from seqlab.api.views import Attention, Inspection, NextToken, Score
from seqlab.errors import UserError
from seqlab.options import CalibrateOptions, CompleteOptions, EvalOptions, PhrasesOptions, TradeoffOptions
from seqlab.private_files import private_umask

if TYPE_CHECKING:
    from seqlab.config import RunConfig
    from seqlab.data.tokenizer import Tokenizer
    from seqlab.generation.complete import Completion
    from seqlab.generation.phrases import PhraseModel
    from seqlab.models import LM



class Run:
    """A trained RUN_DIR: its model, tokenizer and config, and what one can ask of them.

    Made by `seqlab.load(run_dir)` or returned by `seqlab.train`. `model` is the `LM` in eval mode (the model
    contract: `model(idx (B, T), state=None) -> (logits (B, T, vocab), state)`), `tokenizer` its tokenizer,
    `config` its `RunConfig`, `summary` what training reported (steps, best validation loss, tokens/s).
    """

    def __init__(self, path: str | Path, *, device: str = "auto", summary: dict[str, Any] | None = None) -> None:
        self.path, self.device = Path(path), device
        self._summary = summary
        self._loaded: tuple[LM, Tokenizer, RunConfig] | None = None

    def __repr__(self) -> str:
        return f"Run({str(self.path)!r})"

    def __fspath__(self) -> str:
        return str(self.path)

    def _load(self) -> tuple[LM, Tokenizer, RunConfig]:
        if self._loaded is None:
            from seqlab.runs.load import load_run

            self._loaded = load_run(self.path, self.device)  # type: ignore[assignment]
        assert self._loaded is not None
        return self._loaded

    @property
    def model(self) -> LM:
        """The trained model (best checkpoint by validation loss), in eval mode."""
        return self._load()[0]

    @property
    def tokenizer(self) -> Tokenizer:
        """The tokenizer the model was trained with."""
        return self._load()[1]

    @property
    def config(self) -> RunConfig:
        """The run's whole configuration (model, data, train sections)."""
        return self._load()[2]

    @property
    def summary(self) -> dict[str, Any]:
        """What training reported at its end (`run.json`'s summary): steps, best_val_loss, tokens_per_s, ..."""
        if self._summary is None:
            try:
                info = json.loads((self.path / "run.json").read_text(encoding="utf-8"))
            except (OSError, UnicodeDecodeError, json.JSONDecodeError):
                raise UserError(f"{self.path} has no readable run.json; was it written by `seqlab train`?") from None
            self._summary = dict(info.get("summary") or {}) if isinstance(info, dict) else {}
        return self._summary

    # ------------------------------------------------------------ writing

    def complete(self, prefix: str, *, max_words: int = CompleteOptions.max_words,
                 temperature: float = CompleteOptions.temperature, top_k: int | None = CompleteOptions.top_k,
                 top_p: float | None = CompleteOptions.top_p, beam: int = CompleteOptions.beam,
                 seed: int | None = CompleteOptions.seed, threshold: float | None = CompleteOptions.threshold,
                 phrases: bool = CompleteOptions.phrases, phrase_weight: float = CompleteOptions.phrase_weight,
                 reply_to: str | Path | None = CompleteOptions.reply_to,
                 rule: str = CompleteOptions.rule) -> Completion:
        """Suggest how `prefix` (an email typed so far) goes on: up to `max_words` words, greedy by default.

        A positive `temperature` samples (with `top_k` / `top_p`, reproducible with `seed`); `beam` > 1 runs
        beam search. `rule` says what `threshold` gates (`seqlab.generation.gate`): under "expected-chars"
        (the default; lone punctuation is never shown) a suggestion is shown when its best prefix's
        P(words) * (characters - 1) reaches it, under "first-word" when its first word's probability does;
        below it the suggestion comes back empty. `phrases` blends RUN_DIR/phrases.npz (`Run.fit_phrases`)
        in at `phrase_weight`. `reply_to` is the message being answered (its text, or a Path to a message
        file) for a model trained with a model.context. The result has `.text`, `.confidence` and `.words`.
        """
        from seqlab.generation.complete import complete
        from seqlab.generation.reply import read_reply_to, reply_context

        o = CompleteOptions(max_words=max_words, temperature=temperature, top_k=top_k, top_p=top_p, beam=beam,
                            seed=seed, threshold=threshold, phrases=phrases, phrase_weight=phrase_weight,
                            reply_to=reply_to, rule=rule)
        original = read_reply_to(o.reply_to) if isinstance(o.reply_to, Path) else o.reply_to
        model, tok, _ = self._load()
        try:
            return complete(model, tok, prefix, max_words=o.max_words, temperature=o.temperature, top_k=o.top_k,
                            top_p=o.top_p, beam=o.beam, seed=o.seed, threshold=o.threshold,
                            phrases=self._phrases(o.phrases, o.phrase_weight),
                            context=reply_context(model, tok, original), rule=o.rule)
        except ValueError as exc:  # an option out of range (max_words, beam, threshold, rule)
            raise UserError(str(exc)) from None

    def _phrases(self, use: bool, weight: float) -> PhraseModel | None:
        if not use:
            return None
        from seqlab.generation.phrases import PHRASES, PhraseModel

        return PhraseModel.load(self.path / PHRASES, self.tokenizer, weight=weight)

    # ------------------------------------------------------------ reading

    @torch.inference_mode()
    def next_tokens(self, prefix: str, k: int = 5) -> list[NextToken]:
        """The model's `k` likeliest next tokens after `[bos] + prefix`, most likely first."""
        from seqlab.generation.decode import context_limit, model_device

        model, tok, _ = self._load()
        if k < 1:
            raise UserError(f"k must be at least 1, not {k}.")
        ids = [tok.bos_id, *tok.encode(prefix)]
        limit = context_limit(model)
        ids = ids[-limit:] if limit else ids  # the window the model can see
        logits, _ = model(torch.tensor([ids], device=model_device(model)))  # (1, T, V)
        probs = torch.softmax(logits[0, -1].float(), dim=-1)  # (V,)
        top = torch.topk(probs, min(k, probs.numel()))
        return [NextToken(int(i), tok.token_bytes(int(i)).decode("utf-8", errors="replace"), float(p))
                for p, i in zip(top.values, top.indices)]

    @torch.inference_mode()
    def score(self, text: str) -> Score:
        """Per-token log-probabilities and bits per byte of `text` read as one whole email.

        The email is cut as `seqlab eval` cuts it (`seqlab.evaluation.heldout.email_logprobs`), so the bits
        summed over a split's emails are its bits per byte.
        """
        from seqlab.evaluation.heldout import email_logprobs, token_byte_lengths
        from seqlab.inspection.probes import token_labels

        model, tok, _ = self._load()
        ids = tok.encode_email(text)  # [bos] + tokens + [eos]
        logprobs = email_logprobs(model, ids)
        nbytes = token_byte_lengths(tok)[torch.tensor(ids[1:])].numpy()
        return Score(ids, token_labels(tok, ids), logprobs.numpy(), nbytes)

    def attention(self, text: str, *, layer: int | None = None, head: int | None = None,
                  query: int | None = None) -> Attention:
        """The attention weights of every layer and head (or the chosen ones) over `[bos] + text`, and the soft
        lookup of token `query` (default the last; 0 is <bos>) in `layer`/`head` (default 0/0). A model
        without attention is a `UserError`."""
        from seqlab.inspection.probes import attention_maps, soft_lookup

        model, tok, _ = self._load()
        maps = attention_maps(model, tok, text, layer, head)
        lookup = soft_lookup(model, tok, text, -1 if query is None else query, layer or 0, head or 0)
        return Attention(maps, lookup, f"Attention in {self.path.name}")

    def inspect(self, text: str) -> Inspection:
        """The sinusoidal encoding at the model's size, learned positions' similarity (model.pos=learned) and,
        for a GRU, its reset and update gates over `text`."""
        from seqlab.inspection.probes import gru_gates, learned_position_similarity, sinusoidal_table

        model, tok, cfg = self._load()
        gates = ([gru_gates(model, tok, text, layer) for layer in range(cfg.model.n_layer)]
                 if cfg.model.mixer == "gru" else [])
        if not gates and not text.strip():
            raise UserError("the text to inspect is empty; give a few words of an email.")
        similarity = learned_position_similarity(model) if cfg.model.pos == "learned" else None
        return Inspection(sinusoidal_table(cfg.model.block_size, cfg.model.n_embd), similarity, gates)

    # ------------------------------------------------------------ measuring

    def evaluate(self, split: str = EvalOptions.split, *, data: str | Path | None = EvalOptions.data,
                 threshold: float = EvalOptions.threshold, coverage: float | None = EvalOptions.coverage,
                 coverages: Sequence[float] = EvalOptions.coverages,
                 completion_emails: int = EvalOptions.completion_emails,
                 positions_per_email: int = EvalOptions.positions_per_email, phrases: bool = EvalOptions.phrases,
                 phrase_weight: float = EvalOptions.phrase_weight, precision: str = EvalOptions.precision,
                 completions: bool = EvalOptions.completions, saved: bool = EvalOptions.saved,
                 saved_emails: int | None = EvalOptions.saved_emails, saved_words: int = EvalOptions.saved_words,
                 rule: str | None = EvalOptions.rule, saved_threshold: float | None = EvalOptions.saved_threshold,
                 max_wrong_per_100: float = EvalOptions.max_wrong_per_100, dynamic: bool = EvalOptions.dynamic,
                 dynamic_lr: float | None = EvalOptions.dynamic_lr, dynamic_method: str = EvalOptions.dynamic_method,
                 ask: str = EvalOptions.ask) -> dict[str, Any]:
        """What `seqlab eval --json` reports for `split` of the run's DATA_DIR (or `data`): loss, ppl, bpb, the
        compressors' bits per byte (gzip, bz2, xz), and with `completions` ExactMatch@N at each of
        `coverages` (`by_coverage`) and at `coverage`, and (with `saved`) saved characters (`saved_chars`:
        `saved_emails` emails, default the smaller of 100 and `completion_emails`, typed for `saved_words`
        words, at `rule`/`saved_threshold`, default the run's calibration, and each rule's best threshold
        within `max_wrong_per_100`; suggestions asked where `ask` says: "every-letter", as the compose page,
        or "word-starts"). `precision` "run" (as
        trained), "fp32" or "bf16". With `dynamic`, the same measures again under dynamic evaluation
        (`seqlab.evaluation.dynamic`: `dynamic_method` "rms" or "sgd", at `dynamic_lr`, default the
        method's) under "dynamic", beside the frozen model's; the weights on disk are never changed."""
        options = EvalOptions(
            split=split, data=data, threshold=threshold, coverage=coverage, coverages=tuple(coverages),
            completion_emails=completion_emails, positions_per_email=positions_per_email, phrases=phrases,
            phrase_weight=phrase_weight, precision=precision, completions=completions, saved=saved,
            saved_emails=saved_emails, saved_words=saved_words, rule=rule, saved_threshold=saved_threshold,
            max_wrong_per_100=max_wrong_per_100, dynamic=dynamic, dynamic_lr=dynamic_lr,
            dynamic_method=dynamic_method, ask=ask)
        from seqlab.evaluation.report import evaluate_run

        phrase_model = self._phrases(options.phrases, options.phrase_weight)
        result = evaluate_run(self.path, options, self.device, phrase_model=phrase_model)
        if options.dynamic:
            from seqlab.evaluation.dynamic import dynamic_eval

            result["dynamic"] = dynamic_eval(self.path, options, self.device)
        return result

    def tradeoff(self, split: str = TradeoffOptions.split, *, data: str | Path | None = TradeoffOptions.data,
                 emails: int = TradeoffOptions.emails, words: int = TradeoffOptions.words,
                 max_words: int = TradeoffOptions.max_words,
                 max_wrong_per_100: float = TradeoffOptions.max_wrong_per_100, ask: str = TradeoffOptions.ask,
                 mid_word: int = TradeoffOptions.mid_word) -> dict[str, Any]:
        """The trade-off curve of the suggestion rules (`seqlab tradeoff`): `emails` held-out emails typed for
        `words` words; for each rule and threshold of `seqlab.evaluation.saved_chars.CURVE_THRESHOLDS` the
        saved share and wrong suggestions per 100 words ("curve"), and each rule's best threshold within
        `max_wrong_per_100` with 95% bootstrap intervals ("best"). Suggestions are asked where `ask` says
        ("every-letter", as the compose page, or "word-starts", with `mid_word` k > 0 also k letters into
        each word)."""
        from seqlab.evaluation.report import tradeoff_run

        options = TradeoffOptions(split=split, data=data, emails=emails, words=words, max_words=max_words,
                                  max_wrong_per_100=max_wrong_per_100, ask=ask, mid_word=mid_word)
        model, tok, _ = self._load()
        return tradeoff_run(self.path, model, tok, options)

    @private_umask()
    def calibrate(self, coverage: float = CalibrateOptions.coverage, *, split: str = CalibrateOptions.split,
                  emails: int = CalibrateOptions.emails, max_words: int | None = CalibrateOptions.max_words,
                  data: str | Path | None = CalibrateOptions.data, target: str = CalibrateOptions.target,
                  rule: str = CalibrateOptions.rule, max_wrong_per_100: float = CalibrateOptions.max_wrong_per_100,
                  words: int = CalibrateOptions.words, ask: str = CalibrateOptions.ask) -> dict[str, Any]:
        """Choose the confidence threshold at which the model suggests at `coverage` of held-out word boundaries
        (or, with `target="saved"`, the `rule`'s threshold that saves the most characters with at most
        `max_wrong_per_100` wrong suggestions per 100 words, emails typed for `words` words with suggestions
        asked where `ask` says); writes
        RUN_DIR/calibration.json (which the server reads) and returns it, as `seqlab calibrate` does."""
        from seqlab.evaluation.calibration import calibrate_run

        options = CalibrateOptions(coverage=coverage, split=split, emails=emails, max_words=max_words, data=data,
                                   target=target, rule=rule, max_wrong_per_100=max_wrong_per_100, words=words,
                                   ask=ask)
        return calibrate_run(self.path, options, device=self.device)

    @private_umask()
    def fit_phrases(self, *, data: str | Path | None = PhrasesOptions.data,
                    min_context: int = PhrasesOptions.min_context, max_context: int = PhrasesOptions.max_context,
                    min_count: int = PhrasesOptions.min_count) -> dict[str, Any]:
        """Count a person's token n-grams (the train split of `data`, default the run's DATA_DIR) into
        RUN_DIR/phrases.npz for `complete(..., phrases=True)`, as `seqlab phrases` does; returns its summary
        (emails, tokens, rows, path)."""
        from seqlab.generation.phrases import PHRASES, fit_phrases
        from seqlab.runs.load import run_data_dir

        options = PhrasesOptions(data=data, min_context=min_context, max_context=max_context, min_count=min_count)
        folder = run_data_dir(self.path, options.data)
        model = fit_phrases(folder, self.tokenizer, min_context=options.min_context,
                            max_context=options.max_context, min_count=options.min_count)
        model.save(self.path / PHRASES)
        return {"emails": model.meta["emails"], "tokens": model.meta["tokens"], "data": str(folder),
                "rows": sum(len(t[0]) for t in model.tables.values()), "path": str(self.path / PHRASES)}


def load(run_dir: str | Path, *, device: str = "auto", summary: dict[str, Any] | None = None) -> Run:
    """The trained run in RUN_DIR `run_dir`, its best checkpoint loaded on `device` ("auto", "cpu", "cuda",
    "mps"); `UserError` when the folder holds no usable checkpoint."""
    run = Run(run_dir, device=device, summary=summary)
    run.model  # noqa: B018 - load now, so that a bad folder fails here and not at the first question
    return run

