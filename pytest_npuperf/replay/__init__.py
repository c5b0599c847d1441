"""Database rows as cases: collection, the runner loop, the write of a run's results (write.py)."""
