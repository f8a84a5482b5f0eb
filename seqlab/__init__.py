"""seqlab: train, compare and inspect next-token language models on email."""

import os

__version__ = "0.1.0"

# OpenMP threads that wait passively (sleep) instead of spinning. torch's CPU kernels run on an OpenMP
# pool whose idle threads, by default, spin for a while after each parallel region; beside another busy
# process one of them spins on a core it shares, and every later region waits for the thread the
# scheduler put aside: `small` attention with 2 threads fell to 0.39x of its 1-thread speed beside one
# busy loop, and to about 0.1x on a machine shared with test suites (seqlab bench, "threads" rows).
# libgomp reads the variable once, when torch loads it, so it is set here, before any seqlab module
# imports torch; a value the user set is kept.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
