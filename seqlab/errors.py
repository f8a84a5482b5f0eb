"""The one exception type that means "the user asked for something we cannot do".

The CLI turns a `UserError` into exit code 2 and its message (one plain sentence) on stderr, with no
traceback. Anything else that escapes is a bug and keeps its traceback.
"""


class UserError(Exception):
    """A bad path, option or value given by the user; the message is shown as is."""
