"""pytest hooks of pytest_npuperf (replay harness comes with the replay issue)."""
