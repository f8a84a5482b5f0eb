"""Peak memory of a process tree (a process and all its descendants), sampled from /proc in a thread: what a
benchmark reports for a `prepare` whose parsing runs in worker processes."""

from __future__ import annotations

import os
import threading


class TreeMemory:
    """Peak memory of a process and all its descendants, sampled from /proc every `interval` seconds.

    RSS summed over the tree counts pages that forked workers share with the main process once per
    process (an upper bound); PSS (smaps_rollup) divides shared pages among their sharers. On a system
    without /proc both stay 0.
    """

    def __init__(self, pid: int, interval: float = 0.05) -> None:
        self.pid, self.interval = pid, interval
        self.peak_rss = self.peak_pss = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> TreeMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _tree(self) -> list[int]:
        pids, todo = [], [self.pid]
        while todo:
            pid = todo.pop()
            pids.append(pid)
            try:
                for task in os.listdir(f"/proc/{pid}/task"):
                    with open(f"/proc/{pid}/task/{task}/children") as f:
                        todo.extend(int(c) for c in f.read().split())
            except OSError:
                continue
        return pids

    @staticmethod
    def _kb(path: str, field: str) -> int:
        try:
            with open(path) as f:
                for line in f:
                    if line.startswith(field):
                        return int(line.split()[1]) * 1024
        except OSError:
            pass
        return 0

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            pids = self._tree()
            self.peak_rss = max(self.peak_rss, sum(self._kb(f"/proc/{p}/status", "VmRSS:") for p in pids))
