"""seqlab: train, compare and inspect next-token language models on email."""

__version__ = "0.1.0"

# seqlab leaves the OpenMP wait policy to libgomp. OMP_WAIT_POLICY=PASSIVE (idle threads sleep) kept
# `small` attention at 0.99x of its quiet 1-thread speed beside a busy process (spinning: 0.42-0.58x), but
# it halved GRU training on a quiet machine (8,517 against 19,992 tokens/s with ACTIVE), whose many small
# per-step parallel regions pay a wake-up each: a user who shares the machine can set it
# (README, "How fast it is"; `seqlab bench --only threads`).
