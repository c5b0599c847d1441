"""The benchmark suite: its cases come from the database via the pytest_npuperf plugin."""
