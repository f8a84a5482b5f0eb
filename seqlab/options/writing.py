"""The options of the commands that write with a trained RUN_DIR: `seqlab complete` (`CompleteOptions`) and
`seqlab phrases` (`PhrasesOptions`), the same for `Run.complete` and `Run.fit_phrases`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from seqlab.options.fields import DEFAULT_RULE, RULES, at_least_one, lit, one_of, option, require


@dataclass(frozen=True)
class CompleteOptions:
    """`seqlab complete`: how a suggestion for the next words is drawn and when it is shown."""

    max_words: int = option(5, None, kind="positive_int")
    temperature: float = option(0.0, "0 is greedy (default)", kind="float")
    top_k: int | None = option(None, None, kind="positive_int")
    top_p: float | None = option(None, None, kind="unit")
    beam: int = option(1, None, kind="positive_int")
    seed: int | None = option(None, "seed for sampling (reproducible)", kind="int")
    threshold: float | None = option(None, "show a suggestion only when worth it: expected saved characters per "
                                     "chance of a wrong first word (--rule chars-per-wrong), expected saved "
                                     "characters (--rule expected-chars) or the first word's probability (--rule "
                                     "first-word)", kind="non_negative")
    rule: str = option(DEFAULT_RULE, "what --threshold gates (default chars-per-wrong; lone punctuation is never "
                       "shown)", choices=RULES)
    phrases: bool = option(False, "blend the person's phrase model (RUN_DIR/phrases.npz, from `seqlab phrases`) "
                           "into the model's predictions")
    phrase_weight: float = option(0.3, "largest share of the phrase model in the blend (default 0.3)", kind="unit")
    reply_to: str | Path | None = option(None, "the message being answered (a message file or plain text), read "
                                         "through cross-attention by a model trained with a model.context",
                                         kind="path", metavar="FILE")

    def __post_init__(self) -> None:
        require(self.temperature >= 0, f"{{0}} must be 0 or more, not {lit(self.temperature)}", "temperature")
        if self.phrases:
            require(0.0 <= self.phrase_weight <= 1.0,
                    f"{{0}} must be between 0 and 1, not {lit(self.phrase_weight)}", "phrase_weight")
        one_of(self, "rule", RULES)


@dataclass(frozen=True)
class PhrasesOptions:
    """`seqlab phrases`: which token n-grams of a person's mail the phrase model keeps."""

    data: str | Path | None = option(None, "DATA_DIR (default: the one the run trained on)", kind="path")
    min_context: int = option(4, "shortest context in tokens (default 4)", kind="positive_int")
    max_context: int = option(8, "longest context in tokens (default 8)", kind="positive_int")
    min_count: int = option(2, "keep contexts seen at least this often (default 2)", kind="positive_int")

    def __post_init__(self) -> None:
        at_least_one(self, "min_context", "max_context", "min_count")
        require(self.min_context <= self.max_context,
                f"{{0}} {lit(self.min_context)} is longer than {{1}} {lit(self.max_context)}.",
                "min_context", "max_context")
