"""What a DATA_DIR holds, as numbers: `seen.bin`, the state `prepare --update` grows the folder from.

An update must drop mail the folder already holds and put a reply to an old thread in that thread's
split, without reading the old mail again. So every prepare leaves, beside the token files:

- `exact`, `bodies`: the dedupe keys of every kept email (`dedupe.Deduper`, sorted uint64);
- `email_node`, `email_split`: per email, in emails.jsonl order, the digest of its node (`Links.node`)
  and its split (an index into SPLITS), so a reply's parent is found (its context) where it is stored;
- `node`, `node_comp`: every thread node ("m:" ids and "s:" subject keys, `threadtable.py`), sorted, and
  its thread; `comp_split`, `key_len`, `keys`: per thread its split and its key (UTF-8, end to end).

The file: the line `seqlab-seen 1`, a JSON line naming each array's dtype and length, then the arrays'
bytes in that order (little-endian). About 40 bytes an email; a function of the mail and the config only.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from seqlab.data.prepare.thread_split import ThreadSplit
from seqlab.durable import atomic_write_bytes
from seqlab.errors import UserError

__all__ = ["SEEN_FILE", "Held", "held_of", "load_held", "save_held"]

SEEN_FILE = "seen.bin"
_MAGIC = b"seqlab-seen 1\n"
_FIELDS = {"exact": "<u8", "bodies": "<u8", "email_node": "<u8", "email_split": "u1", "node": "<u8",
           "node_comp": "<i4", "comp_split": "u1", "key_len": "<u4", "keys": "u1"}


@dataclass
class Held:
    """The arrays of seen.bin (module doc)."""

    exact: np.ndarray
    bodies: np.ndarray
    email_node: np.ndarray
    email_split: np.ndarray
    node: np.ndarray
    node_comp: np.ndarray
    comp_split: np.ndarray
    key_len: np.ndarray
    keys: np.ndarray

    def __post_init__(self) -> None:
        self._key_off = np.concatenate(([0], np.cumsum(self.key_len, dtype=np.int64)))

    def key(self, comp: int) -> str:
        """The thread key of thread `comp`."""
        return self.keys[self._key_off[comp]:self._key_off[comp + 1]].tobytes().decode("utf-8", "surrogatepass")


def held_of(exact: np.ndarray, bodies: np.ndarray, email_node: np.ndarray, assignment: ThreadSplit) -> Held:
    """The Held of a prepare that has just split its mail (`assignment`)."""
    keys = [assignment.key(c).encode("utf-8", "surrogatepass") for c in range(len(assignment.split_codes))]
    return Held(exact=exact, bodies=bodies, email_node=email_node,
                email_split=assignment.split_codes[assignment.email_comp], node=assignment.node_digests,
                node_comp=assignment.node_comp, comp_split=assignment.split_codes,
                key_len=np.fromiter(map(len, keys), dtype=np.uint32, count=len(keys)),
                keys=np.frombuffer(b"".join(keys), dtype=np.uint8))


def save_held(path: Path, held: Held) -> None:
    arrays = {name: np.ascontiguousarray(getattr(held, name), dtype=dtype) for name, dtype in _FIELDS.items()}
    header = json.dumps([[name, dtype, len(a)] for (name, dtype), a in zip(_FIELDS.items(), arrays.values())])
    atomic_write_bytes(Path(path), b"".join([_MAGIC, header.encode("ascii"), b"\n",
                                             *(a.tobytes() for a in arrays.values())]))


def load_held(path: Path) -> Held:
    """seen.bin read back; a missing, foreign or cut file is a UserError."""
    path = Path(path)
    again = "prepare the folder once more without --update"
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise UserError(f"--update {path.parent} holds no {SEEN_FILE} (it was prepared before `prepare --update` "
                        f"existed); {again}.") from None
    except OSError as exc:
        raise UserError(f"{path} cannot be read ({exc.strerror}); {again}.") from None
    try:
        if not data.startswith(_MAGIC):
            raise ValueError("not a seen.bin file")
        line_end = data.index(b"\n", len(_MAGIC))
        header = json.loads(data[len(_MAGIC):line_end])
        if [h[:2] for h in header] != [list(f) for f in _FIELDS.items()]:
            raise ValueError("unexpected arrays")
        at, out = line_end + 1, {}
        for name, dtype, count in header:
            size = np.dtype(dtype).itemsize * int(count)
            if at + size > len(data):
                raise ValueError("cut short")
            out[name] = np.frombuffer(data, dtype=dtype, count=int(count), offset=at).astype(dtype.lstrip("<"))
            at += size
        if at != len(data):
            raise ValueError("trailing bytes")
    except (ValueError, TypeError, IndexError) as exc:
        raise UserError(f"{path} is damaged ({exc}); {again}.") from None
    return Held(**out)
