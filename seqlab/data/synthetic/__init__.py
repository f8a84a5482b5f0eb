"""A seeded generator of office email (threads, replies, references repeated later), so seqlab runs offline."""
