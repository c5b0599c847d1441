"""Database rows as cases: collection, the runner loop, the write-back of results."""
