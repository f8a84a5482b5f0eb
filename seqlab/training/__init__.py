"""The training loop, its optimiser and learning-rate schedule, progress counters and stop signals."""
