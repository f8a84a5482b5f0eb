"""Mail: sources on disk, MIME, parsing and cleaning, records, dedupe + threads + split, worker processes, spool."""
