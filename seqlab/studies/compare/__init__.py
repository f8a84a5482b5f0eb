"""`seqlab compare`: plan matched runs, train each in a worker process, report."""
