"""Every option of the commands that use a trained RUN_DIR, declared once: a frozen dataclass per command.

Each field holds its default, its doc (the `--help` line) and how the command line reads it; the dataclass
checks its values in `__post_init__` and names the field in the error. `seqlab.cli.options` builds the
argparse flags from the fields and puts the flag name in the error instead. Nothing here imports torch, so
`seqlab --help` stays instant.
"""

from seqlab.options.fields import OptionError, cli_fields, flag_of, option
from seqlab.options.measuring import CalibrateOptions, EvalOptions, TradeoffOptions
from seqlab.options.writing import CompleteOptions, PhrasesOptions

__all__ = ["CalibrateOptions", "CompleteOptions", "EvalOptions", "OptionError", "PhrasesOptions",
           "TradeoffOptions", "cli_fields", "flag_of", "option"]
