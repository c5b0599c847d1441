"""pytest_npuperf: build, measure and guard an operator performance database."""

__version__ = "0.1.0"
