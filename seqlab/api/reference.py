"""docs/api.md, the API reference, generated from the public names' signatures and docstrings.

`python -m seqlab.api.reference > docs/api.md` writes it; `tests/test_api.py` checks that the committed file is
what this prints, so the reference cannot drift from the code. `members(obj)` is also what that test holds
to docstrings and type hints: the public methods and properties of a class.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator
from typing import Any

HEADER = """# seqlab API reference

Generated from the docstrings by `python -m seqlab.api.reference > docs/api.md` (`tests/test_api.py` checks it
is up to date). Everything here is importable from `seqlab` itself (`seqlab.__all__`); a bad path, option or
value raises `seqlab.UserError` with one plain sentence, the message the command line prints. Nothing prints
unless asked (`progress=True`).

```python
import seqlab

data = seqlab.prepare("synthetic", "out/data", count=200)
run = seqlab.train(data, "out/run", preset="tiny", train={"max_steps": 60})
print(run.complete("Hi Dana, could you send me the").text)
```
"""


def public_objects() -> Iterator[tuple[str, Any]]:
    """(name, object) for every name of `seqlab.__all__` but the version string, in that order."""
    import seqlab

    for name in seqlab.__all__:
        if name != "__version__":
            yield name, getattr(seqlab, name)


def members(cls: type) -> Iterator[tuple[str, Callable[..., Any] | property]]:
    """The public methods and properties a class defines itself (not those of object, Exception or a base
    dataclass machinery), in source order."""
    for name, value in vars(cls).items():
        if name.startswith("_"):
            continue
        if isinstance(value, (staticmethod, classmethod)):
            value = value.__func__
        if isinstance(value, property) or inspect.isfunction(value):
            yield name, value


def signature(obj: Any) -> str:
    """The signature as source text (`(a: int, *, b: str = 'x') -> Run`); '' for what has none."""
    try:
        return str(inspect.signature(obj))
    except (TypeError, ValueError):
        return ""


def _doc(obj: Any) -> str:
    return inspect.cleandoc(obj.__doc__ or "")


def _section(name: str, obj: Any) -> list[str]:
    if inspect.isclass(obj):
        lines = [f"## `{name}`", "", f"```python\nclass {name}{signature(obj)}\n```", "", _doc(obj), ""]
        for member, value in members(obj):
            if isinstance(value, property):
                ret = signature(value.fget).partition(" -> ")[2]
                lines += [f"- **`{member}`** (property{': ' + ret if ret else ''}): {_doc(value)}".rstrip(), ""]
            else:
                lines += [f"- **`{member}{signature(value)}`**", "", "  " + _doc(value).replace("\n", "\n  "), ""]
        return lines
    return [f"## `{name}`", "", f"```python\n{name}{signature(obj)}\n```", "", _doc(obj), ""]


def render() -> str:
    """The whole of docs/api.md."""
    lines = [HEADER]
    for name, obj in public_objects():
        lines += _section(name, obj)
    return "\n".join(line.rstrip() for line in "\n".join(lines).splitlines()).rstrip() + "\n"


if __name__ == "__main__":
    print(render(), end="")
