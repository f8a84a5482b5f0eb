"""The options of the commands that measure a trained RUN_DIR: `seqlab eval` (`EvalOptions`), `seqlab calibrate`
(`CalibrateOptions`) and `seqlab tradeoff` (`TradeoffOptions`), the same for `Run.evaluate`, `Run.calibrate`,
`Run.tradeoff` and the evaluation functions they call."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from seqlab.options.fields import (
    ASK_HELP,
    ASK_MODES,
    DEFAULT_RULE,
    MAX_SENTENCE_WORDS,
    RULES,
    at_least_one,
    lit,
    one_of,
    option,
    require,
)

SPLITS = ("val", "test")  # what the commands offer; Python callers may also measure "train"
COVERAGES = (0.05, 0.1, 0.2, 0.5, 1.0)
DYNAMIC_METHODS = ("rms", "sgd")  # seqlab.evaluation.dynamic.METHODS
DATA_DOC = "DATA_DIR (default: the one the run trained on)"
MAX_WRONG_DOC = "wrong suggestions per 100 words the best threshold of each rule may show (default 3)"


def _check_split(split: str, allowed: tuple[str, ...]) -> None:
    require(split in allowed, f"{{0}} must be {', '.join(allowed[:-1])} or {allowed[-1]}, not {lit(repr(split))}.",
            "split")


def _check_fraction(value: float | None, name: str, low_open: bool) -> None:
    """`value` (when set) in (0, 1] if `low_open`, else in [0, 1]."""
    ok = value is None or ((0.0 < value) if low_open else (0.0 <= value)) and value <= 1.0
    require(ok, f"{{0}} must be in {'(' if low_open else '['}0, 1], not {lit(value)}.", name)


def _check_cap(value: float | None, name: str) -> None:
    require(value is None or value >= 0, f"{{0}} must be 0 or more, not {lit(value)}.", name)


@dataclass(frozen=True)
class EvalOptions:
    """`seqlab eval`: held-out loss, bits per byte, ExactMatch, saved characters, optionally dynamic evaluation."""

    data: str | Path | None = option(None, DATA_DOC, kind="path")
    split: str = option("val", None, choices=SPLITS)
    threshold: float = option(0.0, "propose a completion only when the first word's probability is at least this",
                              kind="unit")
    coverage: float | None = option(None, "also report ExactMatch at the threshold that gives this coverage",
                                    kind="unit")
    completion_emails: int = option(200, "held-out emails completions are scored on (default 200)",
                                    kind="positive_int")
    positions_per_email: int = option(5, "word boundaries drawn per email (default 5)", kind="positive_int")
    coverages: tuple[float, ...] = option(COVERAGES, "coverages of the ExactMatch table (default 0.05,0.1,0.2,0.5,1)",
                                          kind="coverages")
    saved_emails: int | None = option(None, "held-out emails typed word by word for saved characters (default 100, "
                                      "at most --completion-emails)", kind="positive_int")
    saved_words: int = option(50, "words typed of each of them (default 50)", kind="positive_int")
    saved: bool = option(True, "skip saved characters")
    ask: str = option("every-letter", ASK_HELP, choices=ASK_MODES)
    rule: str | None = option(None, "suggestion rule saved characters are reported at (default: the run's "
                              "calibration.json, else chars-per-wrong)", choices=RULES)
    saved_threshold: float | None = option(None, "threshold of --rule: a probability for first-word, characters for "
                                           "expected-chars, characters per wrong suggestion for chars-per-wrong",
                                           kind="non_negative")
    max_wrong_per_100: float = option(3.0, MAX_WRONG_DOC, kind="non_negative", flag="max-wrong")
    dynamic: bool = option(False, "also evaluate with dynamic evaluation (a gradient step on each test email after "
                           "scoring it, in date order per sender); the run on disk is not changed")
    dynamic_lr: float | None = option(None, "learning rate of --dynamic's steps (default: the method's; 0 equals "
                                      "the frozen model)", kind="non_negative")
    dynamic_method: str = option("rms", "rms: Krause et al.'s RMS-normalised step (default); sgd: plain SGD",
                                 choices=DYNAMIC_METHODS)
    phrases: bool = option(False, "blend the person's phrase model (RUN_DIR/phrases.npz, from `seqlab phrases`) "
                           "into the model's predictions")
    phrase_weight: float = option(0.3, "largest share of the phrase model in the blend (default 0.3)", kind="unit")
    precision: str = option("run", "number format of the held-out pass: the run's own train.precision as resolved "
                            "on this machine (default; bf16 moved trained models' bits per byte by about 1e-5), "
                            "or fp32 for exact float32", choices=("run", "fp32", "bf16"))
    completions: bool = option(True, "score completions (ExactMatch, saved characters); False: the held-out "
                               "pass only", cli=False)

    def __post_init__(self) -> None:
        _check_split(self.split, ("train", *SPLITS))
        _check_fraction(self.threshold, "threshold", low_open=False)
        _check_fraction(self.coverage or None, "coverage", low_open=True)  # 0 is "no target", as None
        for c in self.coverages:
            _check_fraction(c, "coverages", low_open=True)
        at_least_one(self, "completion_emails", "positions_per_email", "saved_emails", "saved_words")
        _check_cap(self.max_wrong_per_100, "max_wrong_per_100")
        _check_cap(self.saved_threshold, "saved_threshold")
        _check_cap(self.dynamic_lr, "dynamic_lr")
        one_of(self, "ask", ASK_MODES)
        one_of(self, "precision", ("run", "fp32", "bf16"))
        one_of(self, "dynamic_method", DYNAMIC_METHODS)
        if self.rule is not None:
            one_of(self, "rule", RULES)
        if self.phrases:
            _check_fraction(self.phrase_weight, "phrase_weight", low_open=False)

    @property
    def typed_emails(self) -> int:
        """Emails typed for saved characters: `saved_emails`, by default the smaller of 100 and
        `completion_emails` (typing costs a proposal per word: fewer emails suffice)."""
        return min(100, self.completion_emails) if self.saved_emails is None else self.saved_emails


@dataclass(frozen=True)
class CalibrateOptions:
    """`seqlab calibrate`: the threshold the server suggests at, written to RUN_DIR/calibration.json."""

    coverage: float = option(0.5, "target fraction of word boundaries that get a suggestion, in (0, 1] (default 0.5)",
                             kind="float")
    target: str = option("coverage", "coverage: the first word's probability that reaches --coverage; saved: the "
                         "--rule threshold that saves the most characters within --max-wrong (default coverage)",
                         choices=("coverage", "saved"))
    rule: str = option(DEFAULT_RULE, "the rule --target saved tunes", choices=RULES)
    max_wrong_per_100: float = option(3.0, "with --target saved: wrong suggestions allowed per 100 words typed "
                                      "(default 3)", kind="non_negative", flag="max-wrong")
    words: int = option(50, "with --target saved: words typed of each email (default 50)", kind="positive_int")
    ask: str = option("every-letter", "with --target saved: " + ASK_HELP, choices=ASK_MODES)
    split: str = option("val", None, choices=SPLITS)
    emails: int = option(200, "held-out emails to calibrate on", kind="positive_int")
    max_words: int | None = option(None, "words per suggestion: with --target coverage, ExactMatch@1..N is reported "
                                   f"(default 3); with --target saved, a cap (default {MAX_SENTENCE_WORDS}): each "
                                   "suggestion runs to the end of its sentence or line, as the compose page asks",
                                   kind="positive_int")
    data: str | Path | None = option(None, DATA_DOC, kind="path")

    def __post_init__(self) -> None:
        _check_split(self.split, ("train", *SPLITS))
        # not a number at all (a Python caller's mistake) reads as out of range too
        ok = not isinstance(self.coverage, bool) and isinstance(self.coverage, (int, float))
        _check_fraction(self.coverage if ok else float("nan"), "coverage", low_open=True)
        one_of(self, "target", ("coverage", "saved"))
        one_of(self, "rule", RULES)
        _check_cap(self.max_wrong_per_100, "max_wrong_per_100")
        at_least_one(self, "words", "emails", "max_words")
        one_of(self, "ask", ASK_MODES)

    @property
    def words_per_suggestion(self) -> int:
        """`max_words`, by default ExactMatch@1..3 at a coverage, or a suggestion as the page asks for it when
        typing (`target="saved"`)."""
        if self.max_words is not None:
            return self.max_words
        return MAX_SENTENCE_WORDS if self.target == "saved" else 3


@dataclass(frozen=True)
class TradeoffOptions:
    """`seqlab tradeoff`: saved characters against wrong suggestions, for each suggestion rule."""

    data: str | Path | None = option(None, DATA_DOC, kind="path")
    split: str = option("val", None, choices=SPLITS)
    emails: int = option(100, "held-out emails typed (default 100)", kind="positive_int")
    words: int = option(50, "words typed of each (default 50)", kind="positive_int")
    max_words: int = option(MAX_SENTENCE_WORDS, f"words per suggestion at most (default {MAX_SENTENCE_WORDS}): each "
                            "runs to the end of its sentence or line, as the compose page asks", kind="positive_int")
    max_wrong_per_100: float = option(3.0, "the cap on wrong suggestions per 100 words the best thresholds keep to "
                                      "(default 3)", kind="non_negative", flag="max-wrong")
    ask: str = option("every-letter", ASK_HELP, choices=ASK_MODES)
    mid_word: int = option(0, "with --ask word-starts: also ask K letters into each word (default 0)", kind="int",
                           metavar="K")

    def __post_init__(self) -> None:
        _check_split(self.split, SPLITS)
        at_least_one(self, "emails", "words", "max_words")
        _check_cap(self.max_wrong_per_100, "max_wrong_per_100")
        _check_cap(self.mid_word, "mid_word")
        one_of(self, "ask", ASK_MODES)
        require(self.mid_word == 0 or self.ask == "word-starts",
                "{0} (k letters into each word, k >= 1) adds to word-starts only; "
                f"got {{0}}={lit(self.mid_word)} with {{1}} {lit(self.ask)}.", "mid_word", "ask")
