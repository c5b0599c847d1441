"""Root conftest: makes the plugin available from a source checkout that was not installed.

Once the package is installed, pytest loads the plugin through its `pytest11` entry point and
this file adds nothing.
"""

from importlib import metadata

try:
    metadata.distribution("pytest-npuperf")
except metadata.PackageNotFoundError:
    pytest_plugins = ["pytest_npuperf.plugin"]

collect_ignore = ["benchmarks"]
